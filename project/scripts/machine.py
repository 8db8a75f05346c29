"""What the project's runs record about the machine they ran on (the CPU's model tells runs on
hosts of different speed apart)."""
import datetime
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo where there is one."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine() or "unknown"


def utc_now() -> str:
    """Now in UTC, as the reports write dates: ``2026-11-27 02:10 UTC``."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
