"""Training for the verifier (``guards.verifier``) on ``rag.eval.verifier_examples``.

Training fine-tunes the top ``tune_layers`` layers of the embedding model's MiniLM and a one-logit
head. The frozen lower layers run once per example (their output is cached), so an epoch costs
about one forward pass of the tuned layers, and cross-fitted folds share the cache.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from guards.verifier import (
    FORMAT,
    MAX_LENGTH,
    Verifier,
    base_network,
    verifier_inputs,
)
from rag.atomic import atomic_write_bytes
from rag.eval.verifier_examples import VerifierExample


@dataclass(slots=True)
class TrainConfig:
    tune_layers: int = 2
    epochs: int = 3
    batch_size: int = 16
    lr_layers: float = 3e-4
    lr_head: float = 3e-3
    seed: int = 0
    max_length: int = MAX_LENGTH


class FrozenCache:
    """The frozen lower layers' output for every example, computed once (and kept in ``path``
    when given, for the next run on the same examples)."""

    def __init__(
        self,
        verifier: Verifier,
        examples: Sequence[VerifierExample],
        frozen: int,
        path: Path | None = None,
    ):
        import torch

        self.examples = list(examples)
        self.hidden: list[Any] = []
        key = hashlib.sha256(
            json.dumps([frozen, verifier.max_length, [repr(e) for e in self.examples]]).encode()
        ).hexdigest()[:16]
        if path is not None and path.is_file():
            saved = torch.load(path)
            if saved["key"] == key:
                self.hidden = saved["hidden"]
                return
        bert = verifier.model.bert
        pairs = [verifier_inputs(e.question, e.answer, e.passages) for e in self.examples]
        with torch.inference_mode():
            for i in range(0, len(pairs), 32):
                batch = verifier.tokenizer(
                    [a for a, _ in pairs[i : i + 32]],
                    [b for _, b in pairs[i : i + 32]],
                    truncation="only_second",
                    max_length=verifier.max_length,
                    padding=True,
                    return_tensors="pt",
                )
                out = bert(**batch, output_hidden_states=True)
                states = out.hidden_states[frozen]
                for row, mask in zip(states, batch["attention_mask"], strict=True):
                    n = int(mask.sum())
                    self.hidden.append(row[:n].to(torch.float16).clone())
        if path is not None:
            torch.save({"key": key, "hidden": self.hidden}, path)

    def batch(self, indices: Sequence[int]) -> tuple[Any, Any]:
        """Padded hidden states and the attention mask of these examples."""
        import torch

        rows = [self.hidden[i] for i in indices]
        width = max(r.shape[0] for r in rows)
        hidden = torch.zeros(len(rows), width, rows[0].shape[1])
        mask = torch.zeros(len(rows), width, dtype=torch.long)
        for k, r in enumerate(rows):
            hidden[k, : r.shape[0]] = r.float()
            mask[k, : r.shape[0]] = 1
        return hidden, mask


def _top_logits(model: Any, hidden: Any, mask: Any, frozen: int) -> Any:
    """The classifier's logits from the output of layer ``frozen`` (the tuned layers onward)."""
    from transformers.masking_utils import create_bidirectional_mask

    attention = create_bidirectional_mask(
        config=model.config, inputs_embeds=hidden, attention_mask=mask
    )
    for layer in model.bert.encoder.layer[frozen:]:
        hidden = layer(hidden, attention)
    pooled = model.bert.pooler(hidden)
    return model.classifier(model.dropout(pooled)).squeeze(-1)


def tuned_names(model: Any, tune_layers: int) -> list[str]:
    frozen = model.config.num_hidden_layers - tune_layers
    prefixes = [f"bert.encoder.layer.{i}." for i in range(frozen, model.config.num_hidden_layers)]
    prefixes += ["bert.pooler.", "classifier."]
    return [n for n, _ in model.named_parameters() if any(n.startswith(p) for p in prefixes)]


def train_verifier(
    base: Path,
    cache: FrozenCache,
    train: Sequence[int],
    config: TrainConfig,
    *,
    log: Callable[[str], None] = print,
) -> Verifier:
    """A verifier with its top layers and head fine-tuned on the cached examples ``train``
    (indices into ``cache.examples``); classes weighted to balance."""
    import torch

    torch.manual_seed(config.seed)
    verifier = load_base(base, config.max_length)
    model = verifier.model
    frozen = model.config.num_hidden_layers - config.tune_layers
    names = set(tuned_names(model, config.tune_layers))
    for n, p in model.named_parameters():
        p.requires_grad = n in names
    head = [p for n, p in model.named_parameters() if n in names and "encoder.layer" not in n]
    layers = [p for n, p in model.named_parameters() if n in names and "encoder.layer" in n]
    optimizer = torch.optim.AdamW(
        [{"params": layers, "lr": config.lr_layers}, {"params": head, "lr": config.lr_head}],
        weight_decay=0.01,
    )
    labels = np.array([cache.examples[i].label for i in train], dtype=float)
    pos = max(labels.mean(), 1e-3)
    pos_weight = torch.tensor((1 - pos) / pos)
    rng = random.Random(config.seed)
    order = list(train)
    steps = config.epochs * ((len(order) + config.batch_size - 1) // config.batch_size)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer,
        max_lr=[config.lr_layers, config.lr_head],
        total_steps=max(steps, 1),
        pct_start=0.1,
    )
    model.train()
    for epoch in range(config.epochs):
        rng.shuffle(order)
        losses = []
        for i in range(0, len(order), config.batch_size):
            chunk = order[i : i + config.batch_size]
            hidden, mask = cache.batch(chunk)
            target = torch.tensor([float(cache.examples[j].label) for j in chunk])
            logits = _top_logits(model, hidden, mask, frozen)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(
                logits, target, pos_weight=pos_weight
            )
            loss.backward()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            losses.append(loss.item())
        log(f"epoch {epoch + 1}/{config.epochs}: loss {np.mean(losses):.4f}")
    model.eval()
    for p in model.parameters():
        p.requires_grad = False
    return verifier


def cached_scores(
    verifier: Verifier, cache: FrozenCache, indices: Sequence[int], tune_layers: int
) -> list[float]:
    """P(right) of these cached examples (what ``Verifier.score`` gives on them), for a verifier
    whose top ``tune_layers`` layers were trained over ``cache``."""
    import torch

    model = verifier.model
    frozen = model.config.num_hidden_layers - tune_layers
    scores: list[float] = []
    with torch.inference_mode():
        for i in range(0, len(indices), 64):
            hidden, mask = cache.batch(indices[i : i + 64])
            scores += torch.sigmoid(_top_logits(model, hidden, mask, frozen)).tolist()
    return scores


def load_base(base: Path, max_length: int = MAX_LENGTH) -> Verifier:
    """An untrained verifier over the base model (the head initialised at random)."""
    model, tokenizer = base_network(base)
    return Verifier(model, tokenizer, max_length=max_length)


def save_verifier(
    verifier: Verifier, path: Path, config: TrainConfig, about: dict[str, Any]
) -> None:
    """The tuned tensors (half precision) in ``path`` and their description beside it."""
    import torch
    from safetensors.torch import save_file

    names = tuned_names(verifier.model, config.tune_layers)
    state = verifier.model.state_dict()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({n: state[n].to(torch.float16).contiguous() for n in names}, str(path))
    meta = {
        "format": FORMAT,
        "tune_layers": config.tune_layers,
        "max_length": config.max_length,
        "epochs": config.epochs,
        **about,
    }
    atomic_write_bytes(path.with_suffix(".json"), (json.dumps(meta, indent=2) + "\n").encode())
