"""Facts about the job's inputs as the check loads them: the tokenizer's tokens (`tokens`), the chat template and the
dataset's prompts rendered and measured as the trainer does (`chat`), a vision-language job's images (`vision`), the
models a config names (`models`: where a reference resolves, parameter counts, a reward or value model's score head),
whether the tokenizer and model config the trainer saves can be written (`saving`), and the lines and small files of
text the other facts read (`text`)."""
