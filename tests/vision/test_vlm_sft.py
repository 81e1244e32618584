"""SFT on image-text rows with a tiny random Qwen2-VL loaded from a directory: the dataset takes the images through
the processor, the trainer's forward passes them, and the model learns an answer only the image gives."""

from __future__ import annotations

from verl.data.synthetic_vision import colour_rows
from verl.models.tiny_vlm import make_tiny_vlm
from verl.trainer.offline import SFTTrainer


def _rows(swap: bool = False) -> list[dict]:
    rows = []
    for row in colour_rows(8, seed=2):
        colour = row["reward_model"]["ground_truth"]
        if swap:
            colour = "blue" if colour == "red" else "red"
        rows.append({"prompt": row["prompt"], "response": colour, "images": row["images"]})
    return rows


def test_sft_with_images_learns_what_only_the_image_tells(tmp_path) -> None:
    make_tiny_vlm("qwen2_vl", save_dir=str(tmp_path / "model"), seed=1)
    config = {"model.dtype": "float32", "trainer.logger": ["file"], "trainer.device": "cpu"}
    trainer = SFTTrainer(model=str(tmp_path / "model"), dataset=_rows(), max_length=96, config=config)
    assert trainer.processor is not None
    item = trainer._make_dataset(_rows())[0]
    assert item["multi_modal_inputs"]["image_grid_thw"].shape == (1, 3)
    before = trainer.evaluate(_rows())["eval/loss"]
    trainer.train(
        num_train_epochs=12, per_device_train_batch_size=8, learning_rate=1e-2, output_dir=str(tmp_path / "o")
    )
    right, wrong = trainer.evaluate(_rows())["eval/loss"], trainer.evaluate(_rows(swap=True))["eval/loss"]
    # the prompt text is the same for both colours: telling them apart needs the images
    assert right < before and right < wrong - 0.2, (before, right, wrong)
