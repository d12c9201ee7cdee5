"""tracekit command line (being written)."""


def main() -> None:
    print("tracekit")
