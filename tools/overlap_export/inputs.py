"""The grammar of an example input's spec, SHAPE[:DTYPE[:HIGH]] (2x3x32x32, 2x3x32x32:float64,
4x16:int64:50), checked without torch: the command line refuses a bad spec before loading
torch or the model; export.parse_input draws the tensor."""

import re

# The format's dtype names (graph_json's) and torch's other names for them.
DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool")
_ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
            "int": "int32", "short": "int16"}
# The largest bound torch.randint draws below (it takes the bound as an int64).
_HIGH = {"int64": 2**63 - 1, "int32": 2**31, "int16": 2**15, "int8": 2**7, "uint8": 2**8,
         "bool": 2}


def input_spec(spec):
    """(shape, dtype, high) of an input spec: dtype the format's name, high the exclusive
    bound of an integer or bool input's values (None for floating point; 2 when the spec
    gives none). ValueError saying what is wrong with the spec."""
    parts = spec.split(":")
    if len(parts) > 3:
        raise ValueError("expected SHAPE[:DTYPE[:HIGH]], e.g. 2x3x32x32, 2x3x32x32:float64, "
                         "4x16:int64:50")
    if not parts[0]:
        raise ValueError("no shape (dimensions joined by x, e.g. 2x3x32x32)")
    shape = []
    for d in parts[0].split("x"):
        if not re.fullmatch(r"[0-9]+", d):
            raise ValueError(f"'{d}' is not a dimension (a non-negative integer)")
        shape.append(int(d))
    dtype = "float32"
    if len(parts) > 1:
        dtype = _ALIASES.get(parts[1], parts[1])
        if dtype not in DTYPES:
            raise ValueError(f"unknown dtype '{parts[1]}' (one of {', '.join(DTYPES)})")
    floating = dtype.startswith("float") or dtype == "bfloat16"
    if floating:
        if len(parts) > 2:
            raise ValueError(f"a bound ({parts[2]}) is for integer dtypes, not {parts[1]}")
        return shape, dtype, None
    if len(parts) < 3:
        return shape, dtype, 2
    if not re.fullmatch(r"[0-9]+", parts[2]) or int(parts[2]) < 1:
        raise ValueError(f"the bound '{parts[2]}' is not a positive integer")
    high = int(parts[2])
    if high > _HIGH[dtype]:
        raise ValueError(f"the bound {high} exceeds {parts[1]}'s range (at most "
                         f"{_HIGH[dtype]})")
    return shape, dtype, high
