"""The PyTorch side of `benchmarks/pretraining_parity.py`: transformers' BertForPreTraining.

Runs in the peer environment (`make peer-venv`), never in kbert's. It reads
the batches kbert's pipeline wrote (an `.npz` of training batches and one of
held-out batches), trains on them in order with BERT's recipe as kbert's
`Pretrainer` compiles it (AdamW, weight decay 0.01 but none on biases and
LayerNorm, epsilon 1e-6, gradients clipped to norm 1, warm-up over 10 % of
the steps then linear decay to 0; loss = masked-LM cross-entropy averaged
over the real masked positions + NSP cross-entropy), and prints one JSON
line: the held-out scores after every `eval_every` steps.

    benchmarks/.peer-venv/bin/python benchmarks/peers/hf_pretraining.py '{"train": ..., ...}'
"""

import json
import math
import sys
import time

import numpy as np
import torch
from transformers import BertConfig, BertForPreTraining


def tensors(batches, index):
    return {key: torch.from_numpy(np.asarray(batches[key][index], dtype=np.int64 if key != "mlm_weights"
                                             else np.float32)) for key in batches.files}


def losses(model, batch):
    """Summed masked-LM loss, correct predictions and weight; NSP loss and correct predictions."""
    encoded = model.bert(input_ids=batch["token_ids"], token_type_ids=batch["segment_ids"],
                         attention_mask=batch["padding_mask"])
    # Only the masked positions go through the vocabulary projection, as in kbert.
    positions = batch["mask_positions"][:, :, None].expand(-1, -1, encoded.last_hidden_state.shape[-1])
    masked = torch.gather(encoded.last_hidden_state, 1, positions)
    mlm_logits = model.cls.predictions(masked)
    nsp_logits = model.cls.seq_relationship(encoded.pooler_output)
    weights = batch["mlm_weights"].reshape(-1)
    mlm = torch.nn.functional.cross_entropy(mlm_logits.reshape(-1, mlm_logits.shape[-1]),
                                            batch["mlm_labels"].reshape(-1), reduction="none")
    mlm_correct = (mlm_logits.argmax(-1).reshape(-1) == batch["mlm_labels"].reshape(-1)).float()
    nsp = torch.nn.functional.cross_entropy(nsp_logits, batch["nsp_labels"])
    nsp_correct = (nsp_logits.argmax(-1) == batch["nsp_labels"]).float().sum()
    return (mlm * weights).sum(), (mlm_correct * weights).sum(), weights.sum(), nsp, nsp_correct


def evaluate(model, held_out):
    """Held-out scores as Keras' `evaluate` gives them: losses averaged over batches, accuracies pooled."""
    model.eval()
    batches, examples = held_out["token_ids"].shape[:2]
    mlm_losses, nsp_losses, correct, weights, nsp_correct = [], [], 0.0, 0.0, 0.0
    with torch.no_grad():
        for index in range(batches):
            mlm, mlm_correct, weight, nsp, nsp_right = losses(model, tensors(held_out, index))
            mlm_losses.append((mlm / weight).item())
            nsp_losses.append(nsp.item())
            correct, weights, nsp_correct = correct + mlm_correct.item(), weights + weight.item(), \
                nsp_correct + nsp_right.item()
    model.train()
    return {"mlm_loss": float(np.mean(mlm_losses)), "mlm_accuracy": correct / weights,
            "nsp_loss": float(np.mean(nsp_losses)), "nsp_accuracy": nsp_correct / (batches * examples)}


def main():
    job = json.loads(sys.argv[1])
    torch.manual_seed(job["seed"])
    train, held_out = np.load(job["train"]), np.load(job["held_out"])
    shape = job["shape"]
    model = BertForPreTraining(BertConfig(
        vocab_size=job["vocabulary_size"], num_hidden_layers=shape["num_layers"],
        hidden_size=shape["hidden_dim"], num_attention_heads=shape["num_heads"],
        intermediate_size=shape["intermediate_dim"], hidden_dropout_prob=shape["dropout"],
        attention_probs_dropout_prob=shape["dropout"], max_position_embeddings=512,
        hidden_act="gelu", layer_norm_eps=1e-12,
    ))
    no_decay = ("bias", "LayerNorm.weight")
    groups = [
        {"params": [p for n, p in model.named_parameters() if not n.endswith(no_decay)], "weight_decay": 0.01},
        {"params": [p for n, p in model.named_parameters() if n.endswith(no_decay)], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=job["learning_rate"], eps=1e-6)
    steps = train["token_ids"].shape[0]
    warmup = math.ceil(0.1 * steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else max(0.0, (steps - s) / max(steps - warmup, 1)))
    curve, start = [], time.perf_counter()
    model.train()
    for step in range(steps):
        mlm, _, weight, nsp, _ = losses(model, tensors(train, step))
        optimizer.zero_grad()
        (mlm / weight + nsp).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if (step + 1) % job["eval_every"] == 0 or step + 1 == steps:
            curve.append({"step": step + 1, **evaluate(model, held_out)})
    print(json.dumps({"curve": curve, "train_seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
