"""Peak resident memory of the running process, for the benchmarks that print it (a leaf module:
the measured subprocesses import nothing else through it)."""


def peak_rss() -> int:
    """This process's peak resident set (bytes): `VmHWM`, which starts afresh at exec. (Not
    `ru_maxrss`: Linux carries it over from the parent across fork + exec.)"""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
