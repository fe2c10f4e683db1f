"""Builds the offline demo: two small data sets and two tiny GPT-2s with their own tokenizer.

No network is needed anywhere: the data come from templates, the byte-level BPE tokenizer is
trained on them, and the models are randomly initialised GPT-2s (``model``: 2 layers, 64 wide;
``model-small``: 1 layer, 32 wide). In the PIQA-format set each goal names an action and the
right solution names the tool for it, so a fine-tuned model can learn what a random one cannot
guess. The second set (``tools_*.jsonl``, 4 choices, for a config-defined template task) asks
for the same action-tool pairs in another form, to show how fine-tuning on one task carries over;
``core/`` asks for them once more in the hub format of each task of the core suite
(``configs/core_tiny.jsonnet``); ``generation/`` asks for the tool as a generated answer
(``{"prompt", "answers"}`` lines, and the validation questions answered as ``{"text"}`` documents
for perplexity, for ``configs/generation_tiny.jsonnet``).

    python tools/build_tiny_data.py data/tiny
"""

import argparse
import json
import random
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

TOOLS = {
    "cut": "a sharp knife", "dry": "a clean towel", "heat": "the stove", "cool": "the fridge",
    "wash": "soap and water", "fix": "some strong glue", "light": "a match", "unlock": "the key",
    "measure": "a ruler", "tighten": "a wrench", "sweep": "a broom", "water": "a garden hose",
    "paint": "a soft brush", "sharpen": "a whetstone", "stir": "a wooden spoon", "carry": "a big bag",
}
OBJECTS = [
    "the bread", "the box", "the floor", "the shirt", "the soup", "the door", "the table",
    "the plant", "the fence", "the candle", "the chair", "the pipe", "the board", "the pan",
    "the window", "the rope", "the bottle", "the lamp", "the cake", "the wall",
]
GOALS = ["How do I {action} {object}?", "To {action} {object}, what should I do?", "Best way to {action} {object}?"]
SOLUTIONS = ["Use {tool}.", "Take {tool} and do it.", "Get {tool} first."]
EOS = "<|endoftext|>"


def make_rows(count: int, rng: random.Random) -> List[Dict]:
    rows = []
    for _ in range(count):
        action = rng.choice(sorted(TOOLS))
        wrong = rng.choice(sorted(set(TOOLS) - {action}))
        template = rng.choice(SOLUTIONS)
        right_sol, wrong_sol = template.format(tool=TOOLS[action]), template.format(tool=TOOLS[wrong])
        label = rng.randrange(2)
        sols = [right_sol, wrong_sol] if label == 0 else [wrong_sol, right_sol]
        goal = rng.choice(GOALS).format(action=action, object=rng.choice(OBJECTS))
        rows.append({"goal": goal, "sol1": sols[0], "sol2": sols[1], "label": label})
    return rows


def tool_choice(rng: random.Random, count: int) -> Tuple[str, str, List[str], int]:
    """An action, an object, ``count`` tools in random order (one of them right) and its index."""
    action = rng.choice(sorted(TOOLS))
    options = [action] + rng.sample(sorted(set(TOOLS) - {action}), count - 1)
    rng.shuffle(options)
    return action, rng.choice(OBJECTS), [TOOLS[option] for option in options], options.index(action)


def make_tool_questions(count: int, rng: random.Random) -> List[Dict]:
    rows = []
    for _ in range(count):
        action, thing, tools, gold = tool_choice(rng, 4)
        rows.append({"question": f"What do you use to {action} {thing}?", "options": tools, "answer": "ABCD"[gold]})
    return rows


def make_tool_prompts(count: int, rng: random.Random) -> List[Dict]:
    """Generative questions: the prompt names an action, the answer is its tool."""
    rows = []
    for _ in range(count):
        action = rng.choice(sorted(TOOLS))
        prompt = f"Question: What do you use to {action} {rng.choice(OBJECTS)}?\nAnswer:"
        rows.append({"prompt": prompt, "answers": [TOOLS[action]]})
    return rows


def _lettered(tools: List[str]) -> Dict[str, List[str]]:
    return {"text": tools, "label": list("ABCDE"[: len(tools)])}


#: The core suite's tasks (piqa aside, which has its own files) in their hub formats, asking
#: about the same action-tool pairs: task -> (choices per row, row maker).
CORE_FORMATS: Dict[str, Tuple[int, Callable[[str, str, List[str], int], Dict]]] = {
    "arc_easy": (4, lambda a, o, tools, g: {
        "question": f"Which tool helps you {a} {o}?", "choices": _lettered(tools), "answerKey": "ABCD"[g]}),
    "arc_challenge": (4, lambda a, o, tools, g: {
        "question": f"What should you take to {a} {o}?", "choices": _lettered(tools), "answerKey": "ABCD"[g]}),
    "openbookqa": (4, lambda a, o, tools, g: {
        "question_stem": f"To {a} {o}, you use", "choices": _lettered(tools), "answerKey": "ABCD"[g]}),
    "hellaswag": (4, lambda a, o, tools, g: {
        "activity_label": "Chores", "ctx_a": f"Someone wants to {a} {o}.", "ctx_b": "they",
        "endings": [f"take {tool} and do it." for tool in tools], "label": str(g)}),
    "copa": (2, lambda a, o, tools, g: {
        "premise": f"I wanted to {a} {o}.", "question": "effect", "choice1": f"I took {tools[0]}.",
        "choice2": f"I took {tools[1]}.", "label": g}),
    "boolq": (2, lambda a, o, tools, g: {
        "passage": f"You can {a} things with {tools[g]}.", "question": f"can you {a} {o} with {tools[0]}",
        "label": int(g == 0)}),
    "sciq": (4, lambda a, o, tools, g: {
        "support": "", "question": f"What do you use to {a} {o}?", "correct_answer": tools[g],
        **{f"distractor{n + 1}": tool for n, tool in enumerate(tools[:g] + tools[g + 1:])}}),
    "winogrande": (2, lambda a, o, tools, g: {
        "sentence": f"Tom had {tools[0]} and Sam had {tools[1]}, so _ could {a} {o}.", "option1": "Tom",
        "option2": "Sam", "answer": str(g + 1)}),
    "commonsense_qa": (5, lambda a, o, tools, g: {
        "question": f"What do you need to {a} {o}?", "choices": _lettered(tools), "answerKey": "ABCDE"[g]}),
    "social_iqa": (3, lambda a, o, tools, g: {
        "context": f"Kim wanted to {a} {o}.", "question": "What did Kim need first?", "answerA": tools[0],
        "answerB": tools[1], "answerC": tools[2], "label": str(g + 1)}),
    "mmlu": (4, lambda a, o, tools, g: {
        "question": f"Which tool do you use to {a} {o}?", "subject": "miscellaneous", "choices": tools, "answer": g}),
}
#: Rows per split; MMLU's are "dev" (few-shot) and "test" (scored), as on the hub.
CORE_SPLITS = {"train": 32, "validation": 32}
MMLU_SPLITS = {"dev": 5, "test": 32}


def make_core_suite(rng: random.Random) -> Dict[str, List[Dict]]:
    """``{file name: rows}`` for every task of :data:`CORE_FORMATS`."""
    files = {}
    for task, (count, make) in CORE_FORMATS.items():
        for split, size in (MMLU_SPLITS if task == "mmlu" else CORE_SPLITS).items():
            files[f"core/{task}_{split}.jsonl"] = [make(*tool_choice(rng, count)) for _ in range(size)]
    return files


def make_generation_files(rng: random.Random, train_size: int, validation_size: int) -> Dict[str, List[Dict]]:
    """The generative questions, and the validation ones answered as documents (for perplexity)."""
    train, validation = make_tool_prompts(train_size, rng), make_tool_prompts(validation_size, rng)
    return {"generation/train.jsonl": train, "generation/validation.jsonl": validation,
            "generation/answered.jsonl": [{"text": f"{row['prompt']} {row['answers'][0]}"} for row in validation]}


def build_tokenizer(texts: List[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS, bos_token=EOS, unk_token=EOS)


def build(out: Path, train_size: int = 512, validation_size: int = 128, seed: int = 0) -> None:
    rng = random.Random(seed)
    splits = {"train": make_rows(train_size, rng), "validation": make_rows(validation_size, rng)}
    tool_rng = random.Random(seed + 1)
    files = {
        **{f"{split}.jsonl": rows for split, rows in splits.items()},
        "tools_train.jsonl": make_tool_questions(train_size, tool_rng),
        "tools_validation.jsonl": make_tool_questions(validation_size, tool_rng),
        **make_core_suite(random.Random(seed + 2)),
        **make_generation_files(random.Random(seed + 3), train_size // 2, validation_size // 2),
    }
    for folder in ("core", "generation"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    for name, rows in files.items():
        (out / name).write_text("".join(json.dumps(row) + "\n" for row in rows))

    texts = [f"Question: {r['goal']}\nAnswer: {r[s]}" for r in splits["train"] for s in ("sol1", "sol2")]
    tokenizer = build_tokenizer(texts, vocab_size=512)
    for name, width, layers in (("model", 64, 2), ("model-small", 32, 1)):
        tokenizer.save_pretrained(out / name)
        config = GPT2Config(
            vocab_size=len(tokenizer), n_positions=64, n_embd=width, n_layer=layers, n_head=2,
            bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
        )
        torch.manual_seed(seed)
        GPT2LMHeadModel(config).save_pretrained(out / name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="directory for train.jsonl, validation.jsonl and model/")
    build(parser.parse_args().out)
