"""The hostile input corpus: one shared list that every entry point is fed (chat text,
command arguments, config values, memory tool arguments from the model).

Each item is (label, value). Labels name the attack so a failing case reads well."""

from __future__ import annotations

MEGABYTE = "x" * (1024 * 1024)

CORPUS: list[tuple[str, str]] = [
    ("empty", ""),
    ("blank", "   \t  "),
    ("one_megabyte", MEGABYTE),
    ("nul_bytes", "before\x00after\x00"),
    ("lone_high_surrogate", "broken \ud800 text"),
    ("lone_low_surrogate", "\udfff at start"),
    (
        "rtl_override",
        "abc\u202edcba\u202c and \u05e9\u05dc\u05d5\u05dd \u0645\u0631\u062d\u0628\u0627",
    ),
    ("zero_width", "\u200b\u200c\u200d\ufeff"),
    ("zero_width_in_word", "pa\u200bss\u200dword"),
    ("markdown_injection", "**bold** _it_ `code` [link](http://evil.example) ```\nfence"),
    ("markdown_v2_specials", "_*[]()~`>#+-=|{}.!\\"),
    ("html_injection", "<b>bold</b><script>alert(1)</script><a href='x'>"),
    ("sql_injection", "'; DROP TABLE messages; --"),
    ("sql_quote_mix", "\" OR 1=1 -- ' OR ''='"),
    ("like_metachars", "100% _under_ \\back\\ %_%"),
    ("fts_syntax", "NEAR(a b) OR \"unbalanced AND * ^ :col C++ cat-food what's"),
    ("path_traversal", "../../../../etc/passwd"),
    ("path_traversal_windows", "..\\..\\windows\\system32"),
    ("huge_integer", "9" * 400),
    ("negative_integer", "-9223372036854775809"),
    ("unknown_summary_id", "sum_deadbeefdeadbeef"),
    ("emoji", "\U0001f600\U0001f469\u200d\U0001f469\u200d\U0001f467 family"),
    ("newlines_only", "\n\n\n"),
    ("control_chars", "\x01\x02\x1b[31mred\x1b[0m\x7f"),
]

# Values small enough to embed in a tool call, a config file or a command line.
SMALL = [(label, value) for label, value in CORPUS if len(value) <= 4096]

TRACEBACK_MARKS = ("Traceback (most recent call last)", 'File "/', "\n  File ")


def looks_like_traceback(text: str) -> bool:
    return any(mark in text for mark in TRACEBACK_MARKS)
