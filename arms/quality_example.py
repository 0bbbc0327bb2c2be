#!/usr/bin/env python3
"""An external quality check for abbench's quality.command (standard library only).

Asks an OpenAI-compatible server a few arithmetic questions greedily and prints
``{"passed": P, "total": T}`` on the last line of stdout; every question, answer
and verdict goes to stderr. Usage:

    python arms/quality_example.py --base-url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request

QUESTIONS = [
    ("What is 3 + 4? Answer with the number only.", 7),
    ("What is 10 minus 6? Answer with the number only.", 4),
    ("What is 9 times 9? Answer with the number only.", 81),
    ("How many legs does a spider have? Answer with the number only.", 8),
    ("What is 100 divided by 4? Answer with the number only.", 25),
]


def ask(base_url: str, question: str, max_tokens: int, timeout: float) -> str:
    body = json.dumps({"messages": [{"role": "user", "content": question}],
                       "max_tokens": max_tokens, "temperature": 0, "top_p": 1,
                       "stream": False}).encode()
    req = urllib.request.Request(base_url.rstrip("/") + "/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)["choices"][0]["message"]["content"] or ""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args()
    passed = 0
    for question, want in QUESTIONS:
        answer = ask(args.base_url, question, args.max_tokens, args.timeout)
        nums = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?", answer)]
        ok = bool(nums) and nums[-1] == want
        passed += ok
        print(f"{'PASS' if ok else 'FAIL'} {question!r} -> {answer!r} (want {want})",
              file=sys.stderr)
    print(json.dumps({"passed": passed, "total": len(QUESTIONS)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
