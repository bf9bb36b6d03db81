"""Compile each module `gateway/compiled_twins.COMPILED_MODULES` names into its compiled twin
with mypyc (docs/compiled.md): a copy of the source, named `<module>_compiled` and stamped
with the source's SHA-256, becomes a C extension beside the module; the copy is removed.

`make` runs this after installing; when it fails (no C compiler, no Python headers) the
gateway runs those modules interpreted, which is the same code, slower. Exit status: 0 when
every module was compiled.

    python scripts/compile_modules.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pulsar_gateway.gateway.compiled_twins import (  # noqa: E402 - after the path is set
    COMPILED_MODULES,
    STAMP,
    TWIN_SUFFIX,
    source_digest,
)


def twin_source(module: str) -> tuple[Path, Path]:
    """The module's source file and where its twin's copy is written."""
    source = REPO / (module.replace(".", "/") + ".py")
    return source, source.with_name(source.stem + TWIN_SUFFIX + ".py")


def remove_built(copy: Path) -> None:
    """The extension files an earlier build left for the twin `copy` names."""
    for built in copy.parent.glob(copy.stem + "*.so"):
        built.unlink()


def main() -> int:
    # imported here: a missing compiler toolchain is reported, not a traceback at import
    try:
        from mypyc.build import mypycify
        from setuptools import setup
    except ImportError as exc:
        print(f"compile_modules: {exc}: the compiled modules run interpreted", file=sys.stderr)
        return 1
    copies = []
    for module in COMPILED_MODULES:
        source, copy = twin_source(module)
        remove_built(copy)
        stamp = f'\n# the source this twin was compiled from\n{STAMP} = "{source_digest(source)}"\n'
        copy.write_text(source.read_text() + stamp)
        copies.append(copy)
    try:
        with tempfile.TemporaryDirectory(prefix="compile-modules-") as work:
            # built away from the project (setuptools would read its pyproject.toml), then
            # each extension copied beside its source, by package path
            os.chdir(work)
            lib = Path(work, "lib")
            setup(
                name="pulsar-gateway-compiled",
                ext_modules=mypycify(
                    ["--config-file", str(REPO / "pyproject.toml"), *map(str, copies)],
                    target_dir="c",
                ),
                script_args=["--quiet", "build_ext", "--build-temp", "temp", "--build-lib", "lib"],
            )
            for built in lib.rglob("*.so"):
                (REPO / built.relative_to(lib)).write_bytes(built.read_bytes())
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - setuptools exits on a failed build
        print(f"compile_modules: {exc!r}: the compiled modules run interpreted", file=sys.stderr)
        for copy in copies:
            remove_built(copy)
        return 1
    finally:
        os.chdir(REPO)
        for copy in copies:
            copy.unlink(missing_ok=True)
    print("compiled: " + ", ".join(COMPILED_MODULES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
