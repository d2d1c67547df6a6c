"""Unit conversion MCP server: length, mass, time, data size and temperature (read-only)."""

from __future__ import annotations

import json
from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from trajkit.envs.servers import READ_ONLY, number, serve

server = MCPServer(
    "units", version="1.0", instructions="Convert between units of the same quantity.", log_level="WARNING"
)

# quantity -> unit -> factor to the quantity's base unit (metre, kilogram, second, byte)
FACTORS: dict[str, dict[str, float]] = {
    "length": {"mm": 1e-3, "cm": 1e-2, "m": 1.0, "km": 1e3, "in": 0.0254, "ft": 0.3048, "yd": 0.9144, "mi": 1609.344},
    "mass": {"mg": 1e-6, "g": 1e-3, "kg": 1.0, "t": 1e3, "oz": 0.028349523125, "lb": 0.45359237},
    "time": {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0, "week": 604800.0},
    "data": {"B": 1.0, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3},
}
TEMPERATURE = ("C", "F", "K")
Unit = Annotated[str, Field(description="A unit symbol, e.g. km, lb, h, MiB, C.")]


def _quantity(unit: str) -> str:
    if unit in TEMPERATURE:
        return "temperature"
    for quantity, units in FACTORS.items():
        if unit in units:
            return quantity
    raise ToolError(f"unknown unit {unit!r}; call list_units to see the units")


def _to_kelvin(value: float, unit: str) -> float:
    return {"K": value, "C": value + 273.15, "F": (value - 32) * 5 / 9 + 273.15}[unit]


def _from_kelvin(value: float, unit: str) -> float:
    return {"K": value, "C": value - 273.15, "F": (value - 273.15) * 9 / 5 + 32}[unit]


@server.tool(annotations=READ_ONLY)
def convert(
    value: Annotated[float, Field(description="The amount to convert.")], from_unit: Unit, to_unit: Unit
) -> int | float:
    """Convert a value from one unit to another of the same quantity (rounded to 12 digits)."""
    q_from, q_to = _quantity(from_unit), _quantity(to_unit)
    if q_from != q_to:
        raise ToolError(f"cannot convert {q_from} ({from_unit}) to {q_to} ({to_unit})")
    if q_from == "temperature":
        return number(_from_kelvin(_to_kelvin(value, from_unit), to_unit))
    return number(value * FACTORS[q_from][from_unit] / FACTORS[q_from][to_unit])


@server.tool(annotations=READ_ONLY)
def list_units(
    quantity: Annotated[str, Field(description="length, mass, time, data, temperature, or empty for all.")] = "",
) -> str:
    """The known units, per quantity, as JSON."""
    table = {q: list(u) for q, u in FACTORS.items()} | {"temperature": list(TEMPERATURE)}
    if quantity:
        if quantity not in table:
            raise ToolError(f"unknown quantity {quantity!r}; known: {', '.join(table)}")
        table = {quantity: table[quantity]}
    return json.dumps(table)


if __name__ == "__main__":
    serve(server)
