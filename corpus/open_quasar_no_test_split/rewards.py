# Reproduction (not a copy) of the reward functions of troy12x/open-quasar @ a13232b8072 (src/open_r1/rewards.py, open-r1's
# of early February 2025): accuracy compares the completion's LaTeX answer with the dataset's `solution` by
# math_verify (1.0 where the gold cannot be parsed); format wants <think>...</think> <answer>...</answer>;
# reasoning_steps counts step markers (3 for full credit); cosine scales correctness by the completion's length.
import math
import re

from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify


def _answer(content, boxed):
    config = NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True, equations=True, boxed=boxed,
                                 units=True)
    return parse(content, extraction_config=[LatexExtractionConfig(normalization_config=config, boxed_match_priority=0,
                                                                   try_extract_without_anchor=False)],
                 extraction_mode="first_match")


def accuracy_reward(completions, solution, **kwargs):
    rewards = []
    for completion, sol in zip(completions, solution):
        gold = parse(sol, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
        rewards.append(float(verify(_answer(completion[0]["content"], "all"), gold)) if gold else 1.0)
    return rewards


def format_reward(completions, **kwargs):
    pattern = r"^<think>.*?</think>\s*<answer>.*?</answer>$"
    return [1.0 if re.match(pattern, c[0]["content"], re.DOTALL | re.MULTILINE) else 0.0 for c in completions]


def reasoning_steps_reward(completions, **kwargs):
    pattern = r"(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)"
    return [min(1.0, len(re.findall(pattern, c[0]["content"])) / 3) for c in completions]


def get_cosine_scaled_reward(min_value_wrong=-1.0, max_value_wrong=-0.5, min_value_correct=0.5, max_value_correct=1.0,
                             max_len=2050):
    def cosine_scaled_reward(completions, solution, **kwargs):
        rewards = []
        for completion, sol in zip(completions, solution):
            content = completion[0]["content"]
            gold = parse(sol, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
            if not gold:
                rewards.append(1.0)
                continue
            low, high = (min_value_correct, max_value_correct) if verify(_answer(content, True), gold) else \
                (max_value_wrong, min_value_wrong)
            cosine = math.cos(len(content) / max_len * math.pi)
            rewards.append(float(low + 0.5 * (high - low) * (1.0 + cosine)))
        return rewards

    return cosine_scaled_reward
