"""Traces: an observed lifecycle history as JSON lines. ``codec`` encodes and decodes single lines,
``jsonl`` reads and writes whole traces (re-exported here), ``check`` judges one with the invariants.
The pure core never imports this package."""

from omni_fsm.trace.jsonl import (
    FORMAT_VERSION,
    INPUTS,
    NAMES,
    OUTPUTS,
    Step,
    TraceHeader,
    TraceReader,
    TraceWriter,
    decode,
    dump_trace,
    dumps,
    encode,
    parse_header,
    read_trace,
    snake_name,
    write_trace,
)

__all__ = [
    "FORMAT_VERSION", "INPUTS", "NAMES", "OUTPUTS", "Step", "TraceHeader", "TraceReader", "TraceWriter",
    "decode", "dump_trace", "dumps", "encode", "parse_header", "read_trace", "snake_name", "write_trace",
]
