"""policy-react's src/dataset.py, reproduced: MuSiQue rows to a ReSearch system prompt + the question, keeping only
`prompt` and `answer`."""

from datasets import load_dataset

RESEARCH_SYSTEM_PROMPT = (
    "You are a helpful assistant that can solve the given question step by step with the help of the wikipedia "
    "search tool. Given a question, you need to first think about the reasoning process in the mind and then provide "
    "the answer. During thinking, you can invoke the wikipedia search tool to search for fact information about "
    "specific topics if needed. The reasoning process and answer are enclosed within <think> </think> and <answer> "
    "</answer> tags respectively, and the search query and result are enclosed within <search> </search> and <result> "
    "</result> tags respectively. For example, <think> This is the reasoning process. </think> <search> search query "
    "here </search> <result> search result here </result> <think> This is the reasoning process. </think> <answer> "
    "The final answer is \\boxed{answer here} </answer>. In the last part of the answer, the final exact answer is "
    "enclosed within \\boxed{} with latex format.")


def preprocess_musique_sample(example):
    messages = [{"role": "system", "content": RESEARCH_SYSTEM_PROMPT}, {"role": "user", "content": example["question"]}]
    return {"prompt": messages, "answer": example["answer"]}


def load_and_preprocess_musique(split="train"):
    # the original: load_dataset("dgslibisey/MuSiQue", split=split)
    dataset = load_dataset("json", data_files="../data/musique_like.jsonl", split=split)
    if not all(col in dataset.column_names for col in ["question", "answer"]):
        raise ValueError("Dataset is missing required columns: 'question' or 'answer'")
    return dataset.map(preprocess_musique_sample, remove_columns=dataset.column_names)
