"""Wrapping of generated Python statements: a statement longer than the width is broken
inside its brackets, after commas or binary operators, continuation lines aligned with
the opening bracket (or hanging, when the bracket opens far to the right)."""
from __future__ import annotations

OPERATORS = (" | ", " & ", " + ", " - ", " * ", " / ")  # lowest precedence first
OPENING, CLOSING = "([{", ")]}"
TRAILERS = ("", "|", "&", "+", "-", "*", "/")  # what may follow the bracket: a line-ending operator
LEADING_KEYWORDS = ("def", "return", "in", "if", "elif", "while", "raise", "assert", "yield", "not")


def wrap(line: str, width: int) -> list[str]:
    if len(line) <= width or line.lstrip().startswith("#"):
        return [line]
    text = line.lstrip()
    indent = len(line) - len(text)
    if _spanning_bracket(text) is None:
        target, value = _assignment(text)
        if value is None:
            return [line]
        text = f"{target} = ({value})"
    return _split(" " * indent, text, width, indent)


def _depths(text: str) -> list[int]:
    """Per character: its bracket depth (a bracket counts as outside itself), -1 in a string."""
    out, depth, quote, i = [], 0, None, 0
    while i < len(text):
        ch = text[i]
        if quote:
            n = 2 if ch == "\\" else len(quote) if text.startswith(quote, i) else 1
            if n == len(quote) and text.startswith(quote, i):
                quote = None
            out += [-1] * n
            i += n
            continue
        if ch in "'\"":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            out += [-1] * len(quote)
            i += len(quote)
            continue
        if ch in CLOSING:
            depth -= 1
        out.append(depth)
        if ch in OPENING:
            depth += 1
        i += 1
    return out


def _top_level(text: str) -> list[bool]:
    return [d == 0 and ch not in OPENING + CLOSING for ch, d in zip(text, _depths(text))]


def _spanning_bracket(text: str):
    """(open, close) of the brackets to break inside: the longest top-level pair of the call /
    subscript chain that makes up the whole expression (after `target =`, `return`, `for v
    in`, ...) and ends the text (but for closing brackets, ':' or ','), or None."""
    pairs, opened = [], None
    for pos, (ch, depth) in enumerate(zip(text, _depths(text))):
        if depth == 0 and ch in OPENING:
            opened = pos
        elif depth == 0 and ch in CLOSING and opened is not None:
            pairs.append((opened, pos))
            opened = None
    if not pairs or text[pairs[-1][1] + 1:].rstrip(CLOSING + ":,").strip() not in TRAILERS:
        return None
    chain = [pairs[-1]]
    for pair in reversed(pairs[:-1]):
        if " " in text[pair[1]:chain[0][0]]:
            break
        chain.insert(0, pair)
    tokens = _split_at(text[:chain[0][0]], (" ",))
    if len(tokens) >= 2 and tokens[-2] != "=" and tokens[-2] not in LEADING_KEYWORDS \
            and tokens[-1] != "=" and tokens[-1] not in LEADING_KEYWORDS:
        return None  # an operand of a binary operator: break at the operators instead
    return max(chain, key=lambda pair: pair[1] - pair[0])


def _split_at(text: str, separators) -> list[str]:
    """text cut after each top-level separator (kept at the end of its piece, right-stripped)."""
    flags = _top_level(text)
    pieces, start, i = [], 0, 0
    while i < len(text):
        sep = next((s for s in separators if text.startswith(s, i) and all(flags[i:i + len(s)])), None)
        if sep is not None:
            pieces.append(text[start:i + len(sep)].strip())
            start = i + len(sep)
            i = start
        else:
            i += 1
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def _assignment(text: str):
    flags = _top_level(text)
    i = text.find(" = ")
    while i != -1 and not all(flags[i:i + 3]):
        i = text.find(" = ", i + 1)
    if i == -1:
        return text, None
    return text[:i], text[i + 3:]


def _split(prefix: str, text: str, width: int, indent: int) -> list[str]:
    """Lines for `text` written after `prefix` (the start of the first line)."""
    if len(prefix) + len(text) <= width:
        return [prefix + text]
    span = _spanning_bracket(text)
    if span is not None:
        start, end = span
        head, inner, tail = text[:start + 1], text[start + 1:end], text[end:]
        pieces = _split_at(inner, (",",))
        if len(pieces) == 1:
            pieces = _operator_pieces(inner)
        if len(prefix) + len(head) > width * 0.6:  # hang the arguments below the head
            return _pack([prefix + head], None, pieces, tail, " " * (indent + 8), width, indent)
        return _pack([], prefix + head, pieces, tail, " " * (len(prefix) + len(head)), width, indent)
    pieces = _operator_pieces(text)
    if len(pieces) == 1:
        return [prefix + text]
    return _pack([], prefix, pieces, "", " " * len(prefix), width, indent)


def _operator_pieces(text: str) -> list[str]:
    for op in OPERATORS:
        pieces = _split_at(text, (op,))
        if len(pieces) > 1:
            return pieces
    return [text]


def _pack(lines: list[str], current: str | None, pieces: list[str], tail: str, align: str, width: int,
          indent: int) -> list[str]:
    """Place pieces greedily on lines starting at `align`; `current` is the open first line."""
    fresh = True  # nothing placed on `current` yet: the next piece stays on it even if long
    for n, piece in enumerate(pieces):
        if n == len(pieces) - 1:
            piece += tail
        if current is not None:
            sep = "" if fresh or current.endswith(tuple(OPENING)) else " "
            if len(current) + len(sep) + len(piece) <= width:
                current += sep + piece
                fresh = False
                continue
            if fresh:
                sub = _split(current, piece, width, indent)
                lines += sub[:-1]
                current, fresh = sub[-1], False
                continue
            lines.append(current)
        sub = _split(align, piece, width, indent)
        lines += sub[:-1]
        current, fresh = sub[-1], False
    if current is not None:
        lines.append(current)
    return lines
