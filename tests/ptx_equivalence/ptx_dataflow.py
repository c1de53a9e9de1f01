"""Numerics-relevant views of PTX kernel entries.

Two compilations of the same arithmetic can differ in register names, labels,
scheduling of integer address arithmetic and so on; none of that changes the
bits a kernel produces. What does change them is the floating-point work:
which fp operations run, in which order, with which rounding, and on which
values. This module reduces an `.entry` body to two views of exactly that:

fp view
    the floating-point instructions in program order, with their full opcode
    (rounding, ftz, saturation, types) and predication, but no operands.
dataflow view
    for every fp instruction and every store, a hash of the expression tree
    that computes its result (or the stored value). Two entries with the same
    fp view can still associate a sum differently or feed an operand from a
    different buffer; the dataflow view tells them apart.

Index arithmetic (values derived only from integer parameters, special
registers, integer immediates and each other) collapses to one leaf, IDX, so
different but equivalent address or loop-control code does not count. Loads
are leaves named by their opcode and by the kernel parameters or shared
arrays their address derives from.
"""

import difflib
import hashlib
import re
from collections import namedtuple

FLOAT_TYPES = frozenset(("f16", "f16x2", "bf16", "bf16x2", "f32", "f64"))

# Opcodes whose type suffix is a float type but which only move bits.
_BIT_MOVERS = frozenset(("ld", "ldu", "st", "mov", "shfl", "atom", "red"))
# Float math whose float-ness some spellings leave out of the type suffix.
_ALWAYS_FLOAT = frozenset(("rcp", "sqrt", "ex2"))
# Instructions that define no register (the first operand is not a result).
_NO_DESTINATION = ("st.", "bar.", "barrier", "bra", "ret", "exit", "membar",
                   "fence", "red.", "call", "trap")

IDX = "IDX"

Instruction = namedtuple("Instruction", "guard opcode operands predicate")
Instruction.__doc__ = """One PTX statement.

guard      normalised predication prefix ("", "@p " or "@!p "): part of the
           fp view, so adding or dropping a guard on an fp op counts.
opcode     e.g. "fma.rn.f32".
operands   the operand text after the opcode.
predicate  the guard register with its "!" ("!%p3"), or None.
"""


def extract_entries(ptx_text):
    """Maps each `.entry` name of a PTX module to the text of its body."""
    entries = {}
    for match in re.finditer(r"\.entry\s+([A-Za-z0-9_$]+)\s*\(", ptx_text):
        open_brace = ptx_text.index("{", ptx_text.index(")", match.end()))
        entries[match.group(1)] = ptx_text[open_brace + 1:_matching_brace(ptx_text, open_brace)]
    return entries


def entry_names(ptx_text):
    """The `.entry` names of a PTX module, in order."""
    return re.findall(r"\.entry\s+([A-Za-z0-9_$]+)\s*\(", ptx_text)


def _matching_brace(text, open_index):
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    raise ValueError("unbalanced braces in PTX entry body")


def parse_instructions(body):
    """The statements of an entry body, in program order.

    Directives (.reg, .loc, ...), comments and labels are dropped, and so are
    the braces that scope inline-asm blocks (`{ cvt.f32.f16 %f1, %rs1;}`), so
    inline asm is seen as ordinary instructions. Vector operand braces
    (`{%r1, %r2}`) are kept.
    """
    instructions = []
    for line in body.split("\n"):
        for statement in line.split("//")[0].split(";"):
            instruction = _parse_statement(statement)
            if instruction is not None:
                instructions.append(instruction)
    return instructions


def _parse_statement(statement):
    text = statement.strip()
    while text[:1] in ("{", "}"):
        text = text[1:].strip()
    if not text or text.startswith("."):
        return None
    text = re.sub(r"^\$?[A-Za-z0-9_$]+:\s*", "", text)
    guard, predicate = "", None
    match = re.match(r"^@(!?)(%?[A-Za-z0-9_]+)\s+", text)
    if match:
        guard = "@" + match.group(1) + "p "
        predicate = match.group(1) + match.group(2)
        text = text[match.end():]
    if not text:
        return None
    parts = text.split(None, 1)
    return Instruction(guard, parts[0], parts[1] if len(parts) > 1 else "", predicate)


def split_operands(text):
    """Splits operand text at top-level commas ({...} and [...] kept whole)."""
    operands, depth, current = [], 0, ""
    for char in text:
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
        if char == "," and depth == 0:
            operands.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        operands.append(current.strip())
    return operands


def is_float_op(opcode):
    """Whether an opcode computes with floats (conversions to or from floats
    included); loads, stores, moves and shuffles of float registers are not."""
    parts = opcode.split(".")
    if parts[0] == "cvt":
        return any(part in FLOAT_TYPES for part in parts[1:])
    if parts[0] in _BIT_MOVERS:
        return False
    if parts[0] in _ALWAYS_FLOAT:
        return True
    return any(part in FLOAT_TYPES for part in parts[1:])


def fp_view(instructions):
    """The fp instructions with their guard, in program order."""
    return [i.guard + i.opcode for i in instructions if is_float_op(i.opcode)]


def _digest(obj):
    return hashlib.sha1(repr(obj).encode()).hexdigest()[:16]


def _symbol_name(symbol):
    """A name for a symbol that two compilations of the same source share:
    `foo_param_3` -> `param_3` (entry names may differ), a mangled static
    shared array `_ZZ...E4tile` -> `tile`."""
    match = re.search(r"E(\d+)([A-Za-z_][A-Za-z0-9_]*)$", symbol)
    if match and len(match.group(2)) == int(match.group(1)):
        return match.group(2)
    return re.sub(r"^.*_param_", "param_", symbol)


class _DataflowTracer:
    """Builds expression hashes by walking an entry's instructions once.

    Registers resolve to their textually latest definition (PTX from NVRTC is
    close to SSA form; loops reuse registers the same way in both builds). A
    guarded definition is a merge of the new value, the guard and the previous
    value. `provenance` tracks which parameters or shared arrays an address
    register derives from, so loads can be named by buffer.
    """

    def __init__(self):
        self.definitions = {}
        self.provenance = {}
        self.signature = []

    def run(self, instructions):
        for instruction in instructions:
            self._step(instruction)
        return self.signature

    def _step(self, instruction):
        opcode = instruction.opcode
        operands = split_operands(instruction.operands)
        guard_value = self._guard_value(instruction.predicate)
        if opcode.startswith(_NO_DESTINATION):
            if opcode.startswith("st."):
                stored = tuple(self._value(operand) for operand in operands[1:])
                self.signature.append((opcode, _digest((opcode, stored, guard_value))))
            return
        if not operands:
            return
        destination, sources = operands[0], operands[1:]
        expression, provenance = self._expression(opcode, destination, sources)
        if instruction.predicate:
            previous = self.definitions.get(destination, IDX)
            expression = self._combine(("pred", expression, guard_value, previous),
                                       (expression, guard_value, previous))
        self._define(destination, expression, provenance)
        if is_float_op(opcode):
            self.signature.append((opcode, expression))

    def _guard_value(self, predicate):
        if not predicate:
            return IDX
        value = self._value(predicate.lstrip("!"))
        if value != IDX and predicate.startswith("!"):
            return _digest(("not", value))
        return value

    def _expression(self, opcode, destination, sources):
        """The expression an instruction defines, and the provenance its
        result carries."""
        if opcode.startswith("ld.param"):
            expression = _digest((opcode, "param")) if is_float_op(opcode) else IDX
            provenance = self._provenance_of(sources[0]) if opcode.startswith("ld.param.u64") else set()
            return expression, provenance
        if opcode.startswith(("ld.", "ldu.")):
            buffers = tuple(sorted(self._provenance_of(sources[0])))
            return _digest((opcode, "load", buffers)), set()
        provenance = set()
        for source in sources:
            provenance |= self._provenance_of(source)
        values = tuple(self._value(source) for source in sources)
        if opcode.startswith("mov") and len(sources) == 1 and not destination.startswith("{"):
            return values[0], provenance  # a plain copy is transparent
        if is_float_op(opcode):
            return _digest((opcode, values)), provenance
        return self._combine((opcode, values), values), provenance

    def _define(self, destination, expression, provenance):
        for register in re.findall(r"%?[A-Za-z_$][A-Za-z0-9_$]*", destination):
            self.provenance[register] = provenance
        if destination.startswith("{"):
            registers = split_operands(destination[1:-1])
        elif "|" in destination:
            registers = destination.split("|")
        else:
            self.definitions[destination] = expression
            return
        for index, register in enumerate(registers):
            self.definitions[register] = IDX if expression == IDX else _digest((expression, index))

    def _value(self, token):
        token = token.strip()
        if token.startswith("{"):
            parts = tuple(self._value(t) for t in split_operands(token[1:-1]))
            return self._combine(("vec",) + parts, parts)
        if token.startswith("["):
            return IDX
        if token.startswith("!"):
            inner = self._value(token[1:])
            return IDX if inner == IDX else _digest(("not", inner))
        if re.match(r"^-?0[fFdD][0-9A-Fa-f]+$", token):
            return "imm:" + token  # float immediates are data
        return self.definitions.get(token, IDX)

    def _provenance_of(self, token):
        provenance = set()
        for name in re.findall(r"%?[A-Za-z_$][A-Za-z0-9_$.]*", token):
            if name in self.provenance:
                provenance |= self.provenance[name]
            elif not name.startswith("%"):
                provenance.add(_symbol_name(name))
        return provenance

    @staticmethod
    def _combine(obj, parts):
        return IDX if all(part == IDX for part in parts) else _digest(obj)


def dataflow_view(instructions):
    """(opcode, expression hash) for every fp instruction and every store."""
    return _DataflowTracer().run(instructions)


def sequence_diff(expected, actual, limit=8):
    """A few lines saying where two opcode sequences differ."""
    lines = []
    matcher = difflib.SequenceMatcher(a=expected, b=actual, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if len(lines) == limit:
            lines.append("...")
            break
        lines.append("%s original[%d:%d]=%s port[%d:%d]=%s" % (
            tag, i1, i2, expected[i1:i2][:6], j1, j2, actual[j1:j2][:6]))
    return lines


def dataflow_diff(expected, actual, limit=5):
    """The first positions where two dataflow views differ, with the opcode
    of the differing fp instruction or store on each side."""
    lines = []
    if len(expected) != len(actual):
        lines.append("%d fp ops + stores in the original, %d in the port" % (len(expected), len(actual)))
    for index, (a, b) in enumerate(zip(expected, actual)):
        if a != b:
            if len(lines) == limit:
                lines.append("...")
                break
            lines.append("op %d: original %s, port %s, operands computed differently" % (index, a[0], b[0]))
    return lines
