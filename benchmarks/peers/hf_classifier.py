"""The peer of kbert's classifier fine-tuning: Hugging Face transformers on PyTorch (CPU).

Runs in the peer environment (`benchmarks/requirements.txt`), not in
kbert's; `benchmarks/quality.py` starts it with the same checkpoint folder,
examples and hyper-parameters it gives kbert, and reads the one JSON line it
prints. The recipe is BERT's, as kbert's classifier compiles it: AdamW
(weight decay 0.01, none on biases and LayerNorm weights), gradients clipped
to norm 1, linear warm-up over the first 10 % of steps then linear decay to
0, dropout 0.1, a dense layer on the pooled [CLS]. Batches are shuffled each
epoch and padded to their longest text (dynamic padding).

    benchmarks/.peer-venv/bin/python benchmarks/peers/hf_classifier.py \
        --checkpoint FOLDER --data examples.json --epochs 2
"""

import argparse
import json
import os
import time

import torch
from transformers import BertForSequenceClassification, BertTokenizerFast


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a Hugging Face BERT folder")
    parser.add_argument("--data", required=True,
                        help='JSON {"num_classes": n, "train": [[text, label], ...], "eval": [...]}')
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, required=True)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(os.cpu_count())
    data = json.load(open(args.data))
    tokenizer = BertTokenizerFast.from_pretrained(args.checkpoint)
    model = BertForSequenceClassification.from_pretrained(
        args.checkpoint, num_labels=data["num_classes"], hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1)

    def batch(examples):
        texts, labels = zip(*examples)
        inputs = tokenizer(list(texts), padding="longest", truncation=True,
                           max_length=args.sequence_length, return_tensors="pt")
        return inputs, torch.tensor(labels)

    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.999), eps=1e-6)
    train = data["train"]
    steps_per_epoch = -(-len(train) // args.batch_size)
    total = steps_per_epoch * args.epochs
    warmup = max(1, int(0.1 * total + 0.999999))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: step / warmup if step < warmup else max(0.0, (total - step) / (total - warmup)))

    generator = torch.Generator().manual_seed(args.seed)
    start = time.time()
    model.train()
    losses = []
    for _ in range(args.epochs):
        order = torch.randperm(len(train), generator=generator).tolist()
        for step in range(steps_per_epoch):
            inputs, labels = batch([train[i] for i in order[step * args.batch_size:(step + 1) * args.batch_size]])
            loss = model(**inputs, labels=labels).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad()
            losses.append(float(loss))
    train_seconds = time.time() - start

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(data["eval"]), 64):
            inputs, labels = batch(data["eval"][i:i + 64])
            correct += int((model(**inputs).logits.argmax(-1) == labels).sum())
    print(json.dumps({
        "accuracy": correct / len(data["eval"]),
        "train_seconds": train_seconds,
        "train_examples_per_second": len(train) * args.epochs / train_seconds,
        "final_train_loss": sum(losses[-steps_per_epoch:]) / min(len(losses), steps_per_epoch),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }))


if __name__ == "__main__":
    main()
