#!/usr/bin/env python3
"""Turns `qflow check --format json` output into the corpus tables of docs/corpus.md.

Reads one or more JSON documents on stdin (several if the caller split the file list).
Prints Markdown, or with `--write FILE` replaces the part of FILE between the
`<!-- corpus-table:begin -->` and `<!-- corpus-table:end -->` markers.

A refusal's *reason* is its diagnostic code plus a message class: the message with
model-specific parts replaced by `…`. The loader writes element kinds as `<scriptTask>`
and model data (ids, values, expressions) in backticks or double quotes, so the
backticked and quoted parts are the ones replaced; "<scriptTask> is not supported" and
"<signalEventDefinition> … is not supported" stay different reasons. Standard library
only, so anyone can rerun it.
"""

import collections
import json
import re
import sys

BEGIN = "<!-- corpus-table:begin -->"
END = "<!-- corpus-table:end -->"

SPAN = re.compile(r"`([^`]*)`")
QUOTED = re.compile(r'"[^"]*"')


def message_class(message):
    text = SPAN.sub("`…`", message)
    text = QUOTED.sub('"…"', text)
    return text


def documents(text):
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            return
        doc, pos = decoder.raw_decode(text, pos)
        yield doc


def folder(path):
    parts = [p for p in path.split("/") if p not in (".", "")]
    if parts and parts[0] == "camunda" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0] if len(parts) > 1 else "."


def escape(cell):
    return str(cell).replace("|", "\\|")


# Refusals of code qflow will never run: a file with one of them stays refused whatever
# else qflow learns to run, so it is the construct that blocks the file.
FOREIGN_WORDS = ("foreign code", "Java", "listener", "connector", "camunda:field", "camunda:script")


def foreign(d):
    if d["code"] == "Q202":
        return True
    return d["code"] in ("Q103", "Q114", "Q401") and any(w in d["message"] for w in FOREIGN_WORDS)


def blocking(errors):
    """The one construct that blocks a refused file: its first refusal of foreign code,
    else its first error in document order."""
    ordered = sorted(errors, key=lambda d: (d["line"], d["col"]))
    for d in ordered:
        if foreign(d):
            return d
    return ordered[0]


def render(files):
    out = []
    by_folder = collections.OrderedDict()
    for f in sorted(files, key=lambda f: f["file"]):
        counts = by_folder.setdefault(folder(f["file"]), collections.Counter())
        counts[f["status"]] += 1
    total = collections.Counter()
    out.append("| folder | files | loaded | refused |")
    out.append("|---|---:|---:|---:|")
    for name, counts in by_folder.items():
        total.update(counts)
        n = sum(counts.values())
        out.append(f"| `{name}/` | {n} | {counts['loaded']} | {counts['refused']} |")
    n = sum(total.values())
    out.append(f"| **total** | **{n}** | **{total['loaded']}** | **{total['refused']}** |")
    if total["unreadable"]:
        out.append("")
        out.append(f"{total['unreadable']} file(s) could not be read.")

    # Reasons: a refused file counts once per distinct reason; diagnostics count each.
    reason_files = collections.Counter()
    reason_diags = collections.Counter()
    first_reason = collections.Counter()
    for f in files:
        if f["status"] != "refused":
            continue
        errors = [d for d in f["diagnostics"] if d["severity"] == "error"]
        seen = set()
        for d in errors:
            key = (d["code"], message_class(d["message"]))
            reason_diags[key] += 1
            seen.add(key)
        for key in seen:
            reason_files[key] += 1
        if errors:
            d = errors[0]
            first_reason[(d["code"], message_class(d["message"]))] += 1
    out.append("")
    out.append("Refusal reasons (errors only). *files* counts each refused file once per")
    out.append("distinct reason it has; *first* counts each file once, by its first error in")
    out.append("document order; *diagnostics* counts every occurrence.")
    out.append("")
    out.append("| code | reason (message class) | files | first | diagnostics |")
    out.append("|---|---|---:|---:|---:|")
    for key in sorted(reason_files, key=lambda k: (-reason_files[k], k)):
        code, text = key
        out.append(
            f"| {code} | {escape(text)} | {reason_files[key]} | {first_reason[key]} "
            f"| {reason_diags[key]} |"
        )

    for severity, title in [("warning", "Warnings"), ("note", "Notes")]:
        seen = collections.Counter()
        for f in files:
            for d in f["diagnostics"]:
                if d["severity"] == severity:
                    seen[(d["code"], message_class(d["message"]))] += 1
        if not seen:
            continue
        out.append("")
        out.append(f"{title} (on loaded and refused files):")
        out.append("")
        out.append(f"| code | {severity} (message class) | diagnostics |")
        out.append("|---|---|---:|")
        for key in sorted(seen, key=lambda k: (-seen[k], k)):
            out.append(f"| {key[0]} | {escape(key[1])} | {seen[key]} |")

    out.append("")
    out.append("<details><summary>Per file</summary>")
    out.append("")
    out.append("| file | verdict | error codes | what blocks it |")
    out.append("|---|---|---|---|")
    for f in sorted(files, key=lambda f: f["file"]):
        errors = [d for d in f["diagnostics"] if d["severity"] == "error"]
        codes = sorted({d["code"] for d in errors})
        verdict = f["status"]
        if verdict == "loaded":
            procs = ", ".join(f"`{p['id']}`" for p in f["processes"])
            verdict = f"loaded ({procs})"
        blocker = ""
        if errors:
            d = blocking(errors)
            blocker = f"{d['code']} at {d['line']}:{d['col']}: {d['message']}"
        name = f["file"][2:] if f["file"].startswith("./") else f["file"]
        out.append(
            f"| `{escape(name)}` | {escape(verdict)} | {' '.join(codes)} | {escape(blocker)} |"
        )
    out.append("")
    out.append("</details>")
    return "\n".join(out) + "\n"


def main(argv):
    files = []
    for doc in documents(sys.stdin.read()):
        files.extend(doc["files"])
    table = render(files)
    if len(argv) == 3 and argv[1] == "--write":
        path = argv[2]
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if BEGIN not in text or END not in text:
            sys.exit(f"corpus-table: {path} lacks the {BEGIN} / {END} markers")
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(head + BEGIN + "\n" + table + END + tail)
    elif len(argv) == 1:
        sys.stdout.write(table)
    else:
        sys.exit("usage: corpus-table.py [--write FILE] < check.json")


if __name__ == "__main__":
    main(sys.argv)
