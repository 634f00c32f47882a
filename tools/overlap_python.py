"""The Python with torch that overlap's scripts run the exporter under, for tools/zoo.py and
tools/bench.py (import it beside them, as doc_block)."""

import os
import subprocess
import sys

_TOOLS = os.path.dirname(os.path.abspath(__file__))


def use_overlap_python(script):
    """The interpreter tools/python.sh names ($OVERLAP_PYTHON, else overlap's torch 2.x
    environment), exported as OVERLAP_PYTHON for the children. When `script` (its __file__)
    was started by another interpreter (through its `python3` shebang), starts it again under
    that one, once, since the script imports what that Python has (numpy, the exporter)."""
    py = subprocess.run(["bash", os.path.join(_TOOLS, "python.sh")], check=True,
                        stdout=subprocess.PIPE, text=True).stdout.strip()
    os.environ["OVERLAP_PYTHON"] = py
    if os.path.abspath(sys.executable) != os.path.abspath(py) and \
            not os.environ.get("OVERLAP_REEXEC"):
        os.environ["OVERLAP_REEXEC"] = "1"
        os.execv(py, [py, os.path.abspath(script)] + sys.argv[1:])
    return py
