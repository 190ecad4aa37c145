"""The offline deployment checks' shared bookkeeping: run a named check,
print ok or FAIL with its detail, and end with a count and an exit code."""

from __future__ import annotations


class Checks:
    def __init__(self, label: str):
        self.label = label
        self.results: list[bool] = []

    def report(self, name, fn):
        """Runs `fn`; an AssertionError fails the check, its message says why."""
        try:
            detail = fn()
            self.results.append(True)
            print(f"  ok    {name}" + (f" ({detail})" if detail else ""))
        except AssertionError as error:
            self.results.append(False)
            print(f"  FAIL  {name}: {error}")

    def summary(self) -> int:
        """Prints `<label>: n passed, m failed`; the process exit code."""
        failed = self.results.count(False)
        print(f"{self.label}: {len(self.results) - failed} passed, {failed} failed")
        return 1 if failed else 0
