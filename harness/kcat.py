"""kcat on two librdkafka versions: Debian's 2.0.2 and the 2.16 inside confluent-kafka."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import confluent_kafka


def kcat_binary() -> str:
    path = shutil.which("kcat")
    if path is None:
        raise RuntimeError("kcat is not installed (apt-get install -y kcat; .ci/run does it)")
    return path


def new_librdkafka_dir(scratch: Path) -> Path:
    """A folder holding confluent-kafka's librdkafka as librdkafka.so.1, for LD_LIBRARY_PATH."""
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    candidates = sorted(glob.glob(str(libs / "librdkafka-*.so*")))
    if not candidates:
        raise RuntimeError(f"no librdkafka in {libs}")
    target = scratch / "librdkafka-new"
    target.mkdir(parents=True, exist_ok=True)
    for lib in glob.glob(str(libs / "*.so*")):
        link = target / Path(lib).name
        if not link.exists():
            link.symlink_to(lib)
    main = target / "librdkafka.so.1"
    if not main.exists():
        main.symlink_to(candidates[0])
    return target


def run_kcat(
    args: list[str], lib_dir: Path | None = None, stdin: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ)
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    return subprocess.run(
        [kcat_binary(), *args], input=stdin, capture_output=True, timeout=timeout, env=env
    )


def librdkafka_version(lib_dir: Path | None) -> str:
    result = run_kcat(["-V"], lib_dir)
    for line in result.stdout.decode().splitlines():
        if "librdkafka" in line:
            return line.strip()
    return result.stdout.decode()
