# Reproduction (not a copy) of open-r1's reward functions (huggingface/open-r1 @ 1416fa0cf215, src/open_r1/rewards.py):
# accuracy checks the completion's last LaTeX answer against the dataset's `solution` with math_verify (None when
# the gold cannot be parsed, so TRL skips it); format wants <think>/<answer> blocks; tag_count gives partial credit.
import re

from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify


def accuracy_reward(completions, solution, **kwargs):
    contents = [completion[0]["content"] for completion in completions]
    rewards = []
    for content, sol in zip(contents, solution):
        gold = parse(sol, extraction_mode="first_match")
        if len(gold) == 0:
            rewards.append(None)
            continue
        answer = parse(content, extraction_config=[LatexExtractionConfig(
            normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                     equations=True, boxed="all", units=True),
            boxed_match_priority=0, try_extract_without_anchor=False)], extraction_mode="first_match")
        try:
            rewards.append(float(verify(gold, answer)))
        except Exception:
            rewards.append(None)
    return rewards


def format_reward(completions, **kwargs):
    pattern = r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$"
    contents = [completion[0]["content"] for completion in completions]
    return [1.0 if re.match(pattern, c, re.DOTALL | re.MULTILINE) else 0.0 for c in contents]


def tag_count_reward(completions, **kwargs):
    def count(text):
        score = 0.0
        for tag in ("<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>"):
            if text.count(tag) == 1:
                score += 0.25
        return score

    return [count(completion[0]["content"]) for completion in completions]


REWARDS = {"accuracy": accuracy_reward, "format": format_reward, "tag_count": tag_count_reward}
