#!/usr/bin/env python3
"""Turns a command's page in docs/ (Markdown) into a man page (roff).

    md2man.py PAGE.md NAME SECTION OUTPUT

The page's title line ("# `name` - what it does") becomes NAME; a first
code block, SYNOPSIS; each "## heading" a section. Paragraphs, bullet
lists, code blocks and tables (as preformatted text) are kept; inline code
and bold become bold, links their text. Only what docs/ uses is handled.
"""
import datetime
import os
import re
import sys


def inline(text):
    text = text.replace("\\", "\\e")
    for page, ref in (("uroced.md", "uroced(8)"), ("uroce.md", "uroce(1)")):
        text = re.sub(r"\[[^\]]+\]\(" + page + r"\)", ref, text)
    text = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", text)
    text = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", text)
    text = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", text)
    text = text.replace("—", "\\(em").replace("–", "\\(en")
    return text


def line(text):
    # A roff control character at the start of a line must be escaped.
    return "\\&" + text if text[:1] in (".", "'") else text


def convert(markdown, name, section):
    out = []
    lines = markdown.splitlines()
    title = lines[0].lstrip("# ").replace("`", "")
    summary = title.split("—", 1)[-1].strip() if "—" in title else title
    epoch = os.environ.get("SOURCE_DATE_EPOCH")  # reproducible builds
    date = (datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).date()
            if epoch else datetime.date.today()).isoformat()
    out.append(f'.TH {name.upper()} {section} "{date}" "uroce" "uroce manual"')
    out += [".SH NAME", f"{name} \\- {inline(summary)}"]
    in_code = False
    seen_synopsis = False
    described = False
    paragraph = False
    for text in lines[1:]:
        if text.startswith("```"):
            if not in_code:
                if not seen_synopsis:
                    out.append(".SH SYNOPSIS")
                    seen_synopsis = True
                out += [".PP", ".nf"]
            else:
                out.append(".fi")
                if not described:  # the text after the synopsis, before any heading
                    out.append(".SH DESCRIPTION")
                    described = True
            in_code = not in_code
            paragraph = False
            continue
        if in_code:
            out.append(line(text.replace("\\", "\\e")))
            continue
        if text.startswith("#"):
            heading = text.lstrip("# ").replace("`", "")
            out.append(f'.SH "{heading.upper()}"' if text.startswith("## ")
                       else f'.SS "{heading}"')
            described = True
            paragraph = False
            continue
        if not text.strip():
            paragraph = False
            continue
        if re.match(r"^\|[-| :]+\|$", text.strip()):
            continue  # a table's rule
        if text.startswith("|"):
            cells = [inline(c.strip()) for c in text.strip().strip("|").split("|")]
            out += [".br", line("    " + "  \\(bv  ".join(cells))]
            paragraph = True
            continue
        bullet = re.match(r"^(\s*)[-*] (.*)$", text)
        if bullet:
            out += [".IP \\(bu 2", line(inline(bullet.group(2)))]
            paragraph = True
            continue
        if not paragraph:
            out.append(".PP")
            paragraph = True
        out.append(line(inline(text.strip())))
    return "\n".join(out) + "\n"


def main():
    source, name, section, output = sys.argv[1:5]
    with open(source, encoding="utf-8") as f:
        page = convert(f.read(), name, section)
    with open(output, "w", encoding="utf-8") as f:
        f.write(page)


if __name__ == "__main__":
    main()
