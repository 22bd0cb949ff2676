"""Preprocessing, model and postprocessing of the reference target."""

from __future__ import annotations

import numpy as np
import pytest

from tailscope.targets.reference.model import ReferenceModel
from tailscope.targets.reference.postprocessing import softmax, top_classes
from tailscope.targets.reference.preprocessing import (
    CLS_TOKEN_ID,
    IMAGE_SIDE,
    InvalidInputError,
    decode_image,
    split_tokens,
    text_from_body,
    tokenize,
)

VOCAB = 32768


def test_tokenize_is_deterministic_starts_with_cls_and_truncates() -> None:
    ids = tokenize("Hello, World! Hello", VOCAB, max_tokens=512)
    assert ids.dtype == np.int32
    assert ids[0] == CLS_TOKEN_ID
    assert len(ids) == 6, "[CLS] hello , world ! hello"
    assert ids[1] == ids[5], "the same word gets the same id"
    assert np.array_equal(ids, tokenize("HELLO, world! hello", VOCAB, max_tokens=512)), "normalised"
    assert len(tokenize("word " * 100, VOCAB, max_tokens=10)) == 10
    assert np.array_equal(tokenize("", VOCAB, 512), [CLS_TOKEN_ID])
    assert all(0 < i < VOCAB for i in tokenize("a b c d e f", VOCAB, 512)[1:])


def test_long_words_split_into_subword_pieces_with_offsets() -> None:
    tokens = split_tokens("tokenisation x")
    assert [t.text for t in tokens] == ["toke", "##nisa", "##tion", "x"]
    assert [(t.start, t.end) for t in tokens] == [(0, 4), (4, 8), (8, 12), (13, 14)]


def test_text_from_body_reads_json_or_raw_text() -> None:
    assert text_from_body(b'{"text": "hi"}', "application/json; charset=utf-8") == "hi"
    assert text_from_body(b"raw \xff", "text/plain") == "raw \ufffd"
    for bad in (b"{", b'{"txt": "x"}', b'["text"]'):
        with pytest.raises(InvalidInputError):
            text_from_body(bad, "application/json")


def test_decode_image_resizes_any_square_buffer_and_normalises() -> None:
    large = decode_image(bytes(range(256)) * 3 * 64)  # 224 x 224 RGB
    small = decode_image(bytes([255]) * 3 * 4)  # 2 x 2 white
    for image in (large, small):
        assert image.shape == (IMAGE_SIDE, IMAGE_SIDE, 3) and image.dtype == np.float32
    assert np.allclose(small[..., 0], (1.0 - 0.485) / 0.229)
    with pytest.raises(InvalidInputError):
        decode_image(b"ab")


def test_area_resize_averages_blocks() -> None:
    image = np.zeros((64, 64, 3), dtype=np.uint8)
    image[:2, :2] = 255  # one 2x2 block of the 64x64 image = one output pixel
    resized = decode_image(image.tobytes())
    white, black = (1.0 - 0.485) / 0.229, (0.0 - 0.485) / 0.229
    assert resized[0, 0, 0] == pytest.approx(white, rel=1e-5)
    assert resized[1, 1, 0] == pytest.approx(black, rel=1e-5)


@pytest.fixture(scope="module")
def model() -> ReferenceModel:
    return ReferenceModel(dim=16, seed=3)


def test_batched_text_inference_equals_one_request_at_a_time(model: ReferenceModel) -> None:
    requests = [tokenize(text, model.vocab_size, 512) for text in ("short", "a much longer request text here", "")]
    batched = model.classify_texts(requests)
    assert batched.shape == (3, model.num_classes)
    for i, ids in enumerate(requests):
        assert np.allclose(batched[i], model.classify_texts([ids])[0], atol=1e-5)
    assert not np.allclose(batched[0], batched[1])


def test_image_inference_is_batched_and_seeded(model: ReferenceModel) -> None:
    images = [decode_image(bytes([i]) * 3 * 100) for i in (0, 128)]
    logits = model.classify_images(images)
    assert logits.shape == (2, model.num_classes)
    assert np.allclose(logits, ReferenceModel(dim=16, seed=3).classify_images(images))
    assert not np.allclose(logits, ReferenceModel(dim=16, seed=4).classify_images(images))


def test_top_classes_are_sorted_probabilities() -> None:
    logits = np.array([0.0, 3.0, 1.0, 2.0], dtype=np.float32)
    assert softmax(logits).sum() == pytest.approx(1.0)
    best = top_classes(logits, 3)
    assert [entry["class_id"] for entry in best] == [1, 3, 2]
    assert best[0]["score"] > best[1]["score"] > best[2]["score"]
    assert len(top_classes(logits, 10)) == 4
