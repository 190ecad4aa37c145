"""The chart checks' bookkeeping: `@check(name)` runs a check, prints ok or
FAIL with its detail (and a traceback for an error that is no assertion),
and records the result for the closing count.
"""

from __future__ import annotations

import traceback


RESULTS: list[tuple[bool, str]] = []


def check(name):
    def wrap(fn):
        def run(*args, **kwargs):
            try:
                detail = fn(*args, **kwargs)
                RESULTS.append((True, name))
                print(f"  ok    {name}" + (f" ({detail})" if detail else ""))
            except Exception as error:  # noqa: BLE001 - report every failure, keep going
                RESULTS.append((False, name))
                print(f"  FAIL  {name}: {error}")
                if not isinstance(error, AssertionError):
                    traceback.print_exc()
        return run
    return wrap
