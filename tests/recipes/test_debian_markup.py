"""recipes/debian_markup.py: a man page's roff source read as headings and paragraphs of its visible text."""

from __future__ import annotations

from recipes.debian_markup import roff_paras

PAGE = r""".\" a comment, never text
.TH LS "1" "September 2022" "GNU coreutils 9.1" "User Commands"
.SH NAME
ls \- list directory contents
.SH SYNOPSIS
.B ls
[\fI\,OPTION\/\fR]... [\fI\,FILE\/\fR]...
.SH DESCRIPTION
.PP
List information about the FILEs \(em the current directory by default.
Sort if none of \fB\-cftuvSUX\fR is given.
.TP
\fB\-a\fR, \fB\-\-all\fR
do not ignore entries starting with \&.
.SS "Exit status"
.BR ls (1)
exits \(lqquietly\(rq.
"""


def test_a_man_page_reads_as_headings_and_paragraphs_of_its_text():
    assert roff_paras(PAGE) == [
        (True, "NAME"),
        (False, "ls - list directory contents"),
        (True, "SYNOPSIS"),
        (False, "ls [OPTION]... [FILE]..."),
        (True, "DESCRIPTION"),
        (
            False,
            "List information about the FILEs - the current directory by default. Sort if none of -cftuvSUX is given.",
        ),
        (False, "-a, --all do not ignore entries starting with ."),
        (True, "Exit status"),
        (False, 'ls (1) exits "quietly".'),
    ]
