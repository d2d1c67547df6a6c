"""``python FOLDER MODULE ARGS...``: run ``MODULE`` of this package as ``__main__``, as ``python -m`` would.

FOLDER holds only this package and this file (``start.folder``); Python puts a folder it runs on ``sys.path``,
``-I`` or not, so the package is found there and nothing else of trajkit is.
"""

import runpy
import sys

runpy.run_module(f"{__spec__.parent or 'confine'}.{sys.argv.pop(1)}", run_name="__main__", alter_sys=True)
