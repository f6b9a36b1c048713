"""The PyTorch side of `benchmarks/speed.py`: Hugging Face transformers' BERT on the CPU.

Runs in the peer environment (`benchmarks/requirements.txt`, made by `make
peer-venv`), never in kbert's. `speed.py` starts it with one JSON job and
reads the one JSON line it prints: the same workloads, shapes and data it
gives kbert and keras-hub, float32 or bfloat16 autocast.

    benchmarks/.peer-venv/bin/python benchmarks/peers/hf_speed.py '{"precision": "bf16", ...}'
"""

import json
import os
import sys
import time

import torch
from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from timing import timed  # noqa: E402  (benchmarks/timing.py, shared with speed.py)


def config_of(job):
    shape = job["shape"]
    return BertConfig(
        vocab_size=job["vocabulary_size"],
        num_hidden_layers=shape["num_layers"],
        hidden_size=shape["hidden_dim"],
        num_attention_heads=shape["num_heads"],
        intermediate_size=shape["intermediate_dim"],
        max_position_embeddings=512,
        num_labels=2,
    )


def autocast(job):
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=job["precision"] == "bf16")


def random_batch(job, batch_size):
    generator = torch.Generator().manual_seed(0)
    length = job["sequence_length"]
    return {
        "input_ids": torch.randint(0, job["vocabulary_size"], (batch_size, length), generator=generator),
        "token_type_ids": torch.zeros(batch_size, length, dtype=torch.long),
        "attention_mask": torch.ones(batch_size, length, dtype=torch.long),
    }


def optimizer_of(model):
    return torch.optim.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)


def inference(job):
    model = BertModel(config_of(job), add_pooling_layer=False).eval()
    inputs = random_batch(job, job["inference_batch_size"])

    def step():
        with torch.inference_mode(), autocast(job):
            model(**inputs).last_hidden_state.float().sum().item()

    seconds, steps = timed(step, **job["timing"])
    return {"sequences_per_second": job["inference_batch_size"] / seconds, "steps": steps}


def train_step(job):
    model = BertForSequenceClassification(config_of(job)).train()
    optimizer = optimizer_of(model)
    inputs = random_batch(job, job["train_batch_size"])
    labels = torch.randint(0, 2, (job["train_batch_size"],), generator=torch.Generator().manual_seed(1))

    def step():
        optimizer.zero_grad()
        with autocast(job):
            loss = model(**inputs, labels=labels).loss
        loss.backward()
        optimizer.step()

    seconds, steps = timed(step, **job["timing"])
    return {"sequences_per_second": job["train_batch_size"] / seconds, "steps": steps}


def fine_tune(job):
    """Examples/s of a training loop over real sentences, each batch padded to its longest."""
    data = json.load(open(job["data"]))
    texts, labels = data["texts"], data["labels"]
    tokenizer = BertTokenizerFast(vocab_file=job["vocabulary"], do_lower_case=True)
    model = BertForSequenceClassification(config_of(job)).train()
    optimizer = optimizer_of(model)
    batch_size = job["fine_tune_batch_size"]
    warmup, seen, start = job["timing"]["warmup"], 0, None
    for step, first in enumerate(range(0, len(texts), batch_size)):
        if step == warmup:
            start = time.perf_counter()
        inputs = tokenizer(texts[first:first + batch_size], padding="longest", truncation=True,
                           max_length=job["sequence_length"], return_tensors="pt")
        optimizer.zero_grad()
        with autocast(job):
            loss = model(**inputs, labels=torch.tensor(labels[first:first + batch_size])).loss
        loss.backward()
        optimizer.step()
        if start is not None:
            seen += len(labels[first:first + batch_size])
            if time.perf_counter() - start > job["timing"]["budget_seconds"]:
                break
    return {"examples_per_second": seen / (time.perf_counter() - start), "examples": seen}


WORKLOADS = {"inference": inference, "train_step": train_step, "fine_tune": fine_tune}


def main():
    job = json.loads(sys.argv[1])
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count())
    results = {}
    for workload in job["workloads"]:
        results[workload] = WORKLOADS[workload](job)
    print(json.dumps({"results": results, "versions": {"torch": torch.__version__}}))


if __name__ == "__main__":
    main()
