"""The modules the build compiles with mypyc, and the choice, at import, between such a module
and its compiled twin (docs/compiled.md).

A few pure functions hold most of the gateway's CPU on a hot path: writing a stored entry's
messages as one Kafka batch (`storage/kafka/read_batches.kafka_batch`) is about half of a
fetch after a restart, and Python's per-operation cost, not the algorithm, is what it pays.
mypyc compiles such a module unchanged into a C extension; the build (`make`,
scripts/compile_modules.py) compiles a copy of it named `<module>_compiled`, beside it,
stamped with the SHA-256 of the source it was made from. The twin is used only when that
stamp is the digest of the source as it is now: a module edited after the build runs
interpreted (a warning says so) rather than as machine code of an older version, and a
machine that could not compile runs every module interpreted, which is the same code.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

# the modules compiled: pure functions on bytes and ints, type-checked by mypy already
COMPILED_MODULES = ("pulsar_gateway.storage.kafka.read_batches",)
# a twin's name is its module's with this after it
TWIN_SUFFIX = "_compiled"
# the name of the twin's constant holding its source's SHA-256 (hex)
STAMP = "SOURCE_SHA256"


def source_digest(path: Path) -> str:
    """The SHA-256 (hex) of the source file at `path`, as the build stamps it."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def compiled_twin(module: ModuleType) -> ModuleType:
    """`module`'s compiled twin when one was built from `module`'s source as it is now, else
    `module` itself (no twin: nothing compiled here; a twin of another source: a warning)."""
    try:
        twin = importlib.import_module(module.__name__ + TWIN_SUFFIX)
    except ImportError:
        log.debug("%s has no compiled twin: it runs interpreted", module.__name__)
        return module
    source = module.__file__
    if source is None or getattr(twin, STAMP, None) != source_digest(Path(source)):
        log.warning(
            "%s was compiled from another version of its source: it runs interpreted "
            "until it is compiled again (make compiles it)",
            module.__name__,
        )
        return module
    return twin


def is_twin(module: ModuleType) -> bool:
    """Whether `module` is a compiled twin (`compiled_twin` chose it)."""
    return module.__name__.endswith(TWIN_SUFFIX)
