"""Train a GPT-2 with Transformers' Trainer, reporting to disttrain (docs/training-api.md)."""

import argparse
import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint


parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()


class Sequences(torch.utils.data.Dataset):
    """Stands in for your tokenized corpus: counting sequences with random starts and strides."""

    def __init__(self, size: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        starts, strides = torch.randint(0, 256, (size, 1), generator=g), torch.randint(1, 8, (size, 1), generator=g)
        self.ids = (starts + strides * torch.arange(32)) % 256

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


output = os.environ.get("DISTTRAIN_CHECKPOINT_DIR") or "checkpoints"
model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=2))
training = TrainingArguments(
    output_dir=output, max_steps=args.steps, per_device_train_batch_size=8, learning_rate=1e-3,
    logging_steps=10, eval_strategy="steps", eval_steps=50, save_steps=50, save_total_limit=2,
    report_to=[], seed=0)


def next_token(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return logits.argmax(dim=-1)  # keeps a token per position, not the vocabulary's logits


def token_accuracy(prediction) -> dict[str, float]:
    guessed, ids = prediction.predictions[:, :-1], prediction.label_ids[:, 1:]  # each position predicts the next
    return {"accuracy": float((guessed == ids).mean())}


trainer = Trainer(model=model, args=training, train_dataset=Sequences(4096, seed=0),
                  eval_dataset=Sequences(64, seed=1), compute_metrics=token_accuracy,
                  preprocess_logits_for_metrics=next_token)
last = get_last_checkpoint(output) if os.path.isdir(output) else None
if last:
    print(f"resuming from {last}", flush=True)
trainer.train(resume_from_checkpoint=last)
trainer.save_model(os.path.join(output, "final"))  # after a stop the process has ended: only a finished run gets here
print(f"final model in {output}/final", flush=True)
