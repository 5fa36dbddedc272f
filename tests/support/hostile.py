"""Text that comes in from outside at its worst, for the fuzzing tests: NUL characters, lone
surrogates, control characters, digits of other scripts (`"²".isdigit()` is true, `int("²")`
fails), numbers too big for any column, and text too long for one."""

from hypothesis import strategies as st

AWKWARD = [
    "\x00",
    "node-001\x00",
    "\ud800",
    "\u00b2",  # superscript two
    "\uff11\uff12",  # fullwidth 12
    "\u0661",  # Arabic-Indic one
    "-1",
    "1_000",
    " 7 ",
    "1e3",
    str(2**63),
    "9" * 40,
    "9" * 5000,
    "n" * 200,  # past a varchar(128)
    "n" * 1025,
]

HOSTILE_TEXT = st.one_of(
    st.sampled_from(AWKWARD),
    st.text(max_size=20),
    st.text(st.characters(codec=None, categories=["Cs", "Cc", "Nd", "No", "Zs", "So"]), max_size=8),
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
)
