"""policy-react's src/rewards.py, reproduced: the ReSearch reward (paper Eq. 2): the F1 of the last \\boxed{} answer
against the ground truth when it is above 0, else 0.1 for a well-formed rollout, else 0. The function names its
ground-truth parameter `answers`, as the original does."""

import re
import string
from collections import Counter


def normalize_answer(s):
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_score(prediction, ground_truth):
    pred, gold = normalize_answer(prediction).split(), normalize_answer(ground_truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def extract_boxed_answer(text):
    # as written: in the raw pattern "\b" is a word boundary, so a literal "\boxed{" (backslash, b) never matches;
    # the original's own examples write "\boxed" in plain strings, where "\b" is a backspace, and do match
    found = re.findall(r"\boxed{(.*?)}", text)
    return found[-1].strip() if found else None


def check_format_correctness(text):
    if not all(tag in text for tag in ["<think>", "</think>", "<answer>", "</answer>"]):
        return False
    if not re.search(r"</answer>\s*(<|\Z)", text):
        return False
    final = re.search(r"<answer>(.*)</answer>\s*(<|\Z)", text, re.DOTALL)
    if not final or r"\boxed{" not in final.group(1) or "}" not in final.group(1):
        return False
    stack, counts = [], Counter()
    for slash, name in re.findall(r"<(/?)(think|search|result|answer)>", text):
        counts[name] += 1
        if not slash:
            stack.append(name)
        elif stack and stack[-1] == name:
            stack.pop()
        else:
            return False
    return not stack and all(counts[t] % 2 == 0 for t in ("think", "answer", "search", "result"))


def research_reward_func(prompts, completions, answers, **kwargs):
    rewards = []
    for i in range(len(completions)):
        if not completions[i]:
            rewards.append(0.0)
            continue
        text = completions[i][-1]["content"]
        predicted = extract_boxed_answer(text)
        f1 = f1_score(predicted, answers[i]) if predicted is not None else 0.0
        rewards.append(f1 if f1 > 0 else (0.1 if check_format_correctness(text) else 0.0))
    return rewards
