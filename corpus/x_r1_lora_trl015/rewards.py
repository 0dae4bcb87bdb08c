# Reproduction (not a copy) of X-R1's reward functions (dhcode-cpp/X-R1 @ 208e0bf534c9, src/x_r1/rewards.py):
# accuracy parses the dataset's `solution` as LaTeX and verifies the completion's boxed answer with math_verify;
# where the gold is not LaTeX, X-R1 asks an OpenAI endpoint to compare texts (its medical data), here a plain text
# comparison (the corpus's data is LaTeX, so that branch is not taken). format wants <think>/<answer> blocks.
import re

from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify


def _normalize(text):
    return re.sub(r"\s+", " ", (text or "").strip().lower())


def _answer_block(text):
    match = re.search(r"<answer>(.*?)</answer>", text or "", re.DOTALL)
    return match.group(1).strip() if match else (text or "").strip()


def accuracy_reward(completions, solution, **kwargs):
    contents = [completion[0]["content"] for completion in completions]
    rewards = []
    for content, sol in zip(contents, solution):
        gold = parse(sol, extraction_mode="first_match", extraction_config=[LatexExtractionConfig()])
        if len(gold) != 0:
            answer = parse(content, extraction_config=[LatexExtractionConfig(
                normalization_config=NormalizationConfig(nits=False, malformed_operators=False, basic_latex=True,
                                                         equations=True, boxed="all", units=True),
                boxed_match_priority=0, try_extract_without_anchor=False)], extraction_mode="first_match")
            reward = float(verify(answer, gold))
        else:
            reward = 1.0 if _normalize(_answer_block(content)) == _normalize(sol) else 0.0
        rewards.append(reward)
    return rewards


def format_reward(completions, **kwargs):
    pattern = r"^<think>.*?</think>\s*<answer>.*?</answer>$"
    contents = [completion[0]["content"] for completion in completions]
    return [1.0 if re.match(pattern, content, re.DOTALL) else 0.0 for content in contents]
