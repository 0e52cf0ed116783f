"""Entry point of one rank in the multi-process tests: ``python -m tests.rank_main module:function '[args]'``.

The function's return value is written as JSON to ``$IRIS_TEST_RESULT``.
"""

import importlib
import json
import os
import sys


def main() -> None:
    module_name, function_name = sys.argv[1].split(":")
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
    result = getattr(importlib.import_module(module_name), function_name)(*args)
    with open(os.environ["IRIS_TEST_RESULT"], "w") as out:
        json.dump(result, out)


if __name__ == "__main__":
    main()
