"""Builds the offline preference demo from the chat demo's conversations (``chat/*.jsonl``, made by
``tools/build_chat_data.py``): each conversation becomes a pair as TRL's ``DPOTrainer`` takes it,
``{"prompt": [turns before the last answer], "chosen": [the last answer], "rejected": [another
tool's name]}``, the rejected tool the next one of the demo's tools (in sorted order) after the
right one. No network is needed:

    python tools/build_preference_data.py data/tiny
"""

import argparse
import json
from pathlib import Path

from build_tiny_data import TOOLS


def build(out: Path) -> None:
    tools = sorted(set(TOOLS.values()))
    (out / "preference").mkdir(parents=True, exist_ok=True)
    for split in ("train", "validation"):
        rows = []
        for line in (out / "chat" / f"{split}.jsonl").read_text().splitlines():
            *prompt, answer = json.loads(line)["messages"]
            wrong = tools[(tools.index(answer["content"]) + 1) % len(tools)]
            rows.append({"prompt": prompt, "chosen": [answer], "rejected": [{"role": "assistant", "content": wrong}]})
        (out / "preference" / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the demo data directory (data/tiny)")
    build(parser.parse_args().out)
