"""The model's Markdown -> the text Telegram shows plus its formatting entities, losing
no character of what the model wrote.

The shown text is the source with the *Markdown markers* removed, and nothing else
changed. The markers, and only they, are:

- `**` around bold text, `*` around italic text, `~~` around struck text: a pair on one
  line, the opening one not preceded by a letter or digit and followed by a non-space,
  the closing one preceded by a non-space and not followed by a letter or digit, with
  something between (so `2*3*4`, `a * b * c` and `x**2` stay as written); a `*` pair
  never borders another `*`;
- the backtick runs around inline code (a run closed by one of the same length on the
  same line; the code between is shown verbatim);
- `[` and `](url)` around a link's text, for an `http(s)://`, `tg://` or `mailto:` URL
  without spaces or parentheses;
- `#` to `######` and the spaces after them at the start of a line (a heading: bold);
- `>` and one space after it at the start of a line (a quote);
- a fenced code block's opening and closing lines, newline included (``` or ~~~, with
  an info string whose first word becomes the language; an unclosed block runs to the
  end).

Everything else is literal: underscores (`__init__`, `snake_case`), backslashes (`\\.`),
HTML-like tags (`List<String>`, `<br>`), `&amp;`, list bullets and numbers, tables,
rules. Markdown that is not formatted shows its markers: a reply never loses text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(?=\S)")
_QUOTE = re.compile(r"^ {0,3}> ?")
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(((?:https?://|tg://|mailto:)[^\s()]+)\)")
_DELIMITERS = ("**", "~~", "*")
_TYPES = {"**": "bold", "*": "italic", "~~": "strikethrough"}


@dataclass(frozen=True)
class Span:
    """A formatting entity over code points [start, end) of the shown text."""

    type: str
    start: int
    end: int
    url: str | None = None
    language: str | None = None


@dataclass
class Rendered:
    text: str = ""
    spans: list[Span] = field(default_factory=list)
    markers: list[tuple[int, int]] = field(default_factory=list)  # source ranges removed

    def _emit(self, s: str) -> None:
        self.text += s

    def _span(
        self, kind: str, start: int, *, url: str | None = None, language: str | None = None
    ) -> None:
        """A span from `start` to the end of the text so far, trailing newlines left
        out (a block's own line break is not part of its formatting)."""
        end = len(self.text.rstrip("\r\n"))
        if end > start:
            self.spans.append(Span(kind, start, end, url, language))


def render_markdown(src: str) -> Rendered:
    """The shown text, its spans and the marker ranges of `src` (module docstring)."""
    out = Rendered()
    lines = src.splitlines(keepends=True)
    i, pos = 0, 0
    while i < len(lines):
        line = lines[i]
        body = line.rstrip("\r\n")
        fence = _FENCE.match(body)
        if fence and not (fence[1][0] == "`" and "`" in fence[2]):
            i, pos = _code_block(out, lines, i, pos, fence[1], fence[2])
            continue
        if (quote := _QUOTE.match(body)) is not None:
            start = len(out.text)
            while i < len(lines) and (quote := _QUOTE.match(lines[i])) is not None:
                out.markers.append((pos, pos + quote.end()))
                _inline(out, lines[i], quote.end(), pos)
                pos += len(lines[i])
                i += 1
            out._span("blockquote", start)
            continue
        if (heading := _HEADING.match(body)) is not None:
            out.markers.append((pos, pos + heading.end()))
            start = len(out.text)
            _inline(out, body, heading.end(), pos)
            out._span("bold", start)
            out._emit(line[len(body) :])
        else:
            _inline(out, line, 0, pos)
        pos += len(line)
        i += 1
    return out


def _code_block(
    out: Rendered, lines: list[str], i: int, pos: int, marker: str, info: str
) -> tuple[int, int]:
    """A fenced block from line `i`: its fence lines are markers, its content `pre`."""
    out.markers.append((pos, pos + len(lines[i])))
    pos += len(lines[i])
    i += 1
    start = len(out.text)
    while i < len(lines):
        m = _FENCE.match(lines[i].rstrip("\r\n"))
        if m and m[1][0] == marker[0] and len(m[1]) >= len(marker) and not m[2].strip():
            break
        out._emit(lines[i])
        pos += len(lines[i])
        i += 1
    words = info.split()
    out._span("pre", start, language=words[0] if words else None)
    if i < len(lines):  # the closing fence
        out.markers.append((pos, pos + len(lines[i])))
        pos += len(lines[i])
        i += 1
    return i, pos


def _word(ch: str) -> bool:
    return ch.isalnum()


def _opens(s: str, i: int, d: str, hi: int) -> bool:
    after = i + len(d)
    if after >= hi or s[after].isspace():
        return False
    if i > 0 and (_word(s[i - 1]) or (d == "*" and s[i - 1] == "*")):
        return False
    return not (d == "*" and s[after] == "*")


def _closes(s: str, j: int, d: str, hi: int) -> bool:
    after = j + len(d)
    if s[j - 1].isspace() or (after < hi and _word(s[after])):
        return False
    return not (d == "*" and (s[j - 1] == "*" or (after < hi and s[after] == "*")))


def _code_end(s: str, i: int, hi: int) -> tuple[int, int] | None:
    """For a backtick run at `i`: (content end, span end) of its inline code, if any."""
    n = i
    while n < hi and s[n] == "`":
        n += 1
    run = n - i
    j = n
    while j < hi:
        if s[j] == "`":
            k = j
            while k < hi and s[k] == "`":
                k += 1
            if k - j == run:
                return j, k
            j = k
        else:
            j += 1
    return None


def _closer(s: str, start: int, d: str, hi: int) -> int | None:
    """Where delimiter `d` opened before `start` closes, skipping inline code."""
    j = start
    while j < hi:
        if s[j] == "`":
            code = _code_end(s, j, hi)
            if code is not None:
                j = code[1]
                continue
            while j < hi and s[j] == "`":
                j += 1
            continue
        if s.startswith(d, j) and j > start and _closes(s, j, d, hi):
            return j
        j += 1
    return None


def _inline(out: Rendered, s: str, lo: int, base: int, hi: int | None = None) -> None:
    """Inline Markdown of `s[lo:hi]` (one line; `base` is `s`'s offset in the source)."""
    hi = len(s) if hi is None else hi
    i, literal = lo, lo
    while i < hi:
        ch = s[i]
        handled = None
        if ch == "`":
            code = _code_end(s, i, hi)
            if code is None:
                while i < hi and s[i] == "`":  # an unmatched run stays as it is
                    i += 1
                continue
            out._emit(s[literal:i])
            run = code[1] - code[0]
            out.markers += [(base + i, base + i + run), (base + code[0], base + code[1])]
            start = len(out.text)
            out._emit(s[i + run : code[0]])
            out._span("code", start)
            handled = code[1]
        elif ch == "[" and (link := _LINK.match(s, i, hi)) is not None:
            out._emit(s[literal:i])
            out.markers += [(base + i, base + i + 1), (base + link.end(1), base + link.end())]
            start = len(out.text)
            out._emit(link[1])
            out._span("text_link", start, url=link[2])
            handled = link.end()
        elif ch in "*~":
            d = next((d for d in _DELIMITERS if s.startswith(d, i)), None)
            if d is not None and _opens(s, i, d, hi):
                j = _closer(s, i + len(d), d, hi)
                if j is not None:
                    out._emit(s[literal:i])
                    out.markers += [(base + i, base + i + len(d)), (base + j, base + j + len(d))]
                    start = len(out.text)
                    _inline(out, s, i + len(d), base, j)
                    out._span(_TYPES[d], start)
                    handled = j + len(d)
        if handled is None:
            i += 1
        else:
            i = literal = handled
    out._emit(s[literal:hi])
