"""A YOLOv8n exported by Ultralytics itself, for the runtime bench's comparison with Ultralytics'
``predict(stream=True)``: no pretrained weights can be downloaded here, so it is trained on the
shapes scenes (``models.data``, the data shapes-yolo learns from), briefly, in Ultralytics'
own environment, and exported to ONNX at 640x640 as users export theirs.

Two steps, each run by its own interpreter (Ultralytics is a peer, never a vidpipe dependency):

    .venv/bin/python -m app.bench.yolov8n dataset build/yolov8n/data
    ULTRA/bin/python -P app/bench/yolov8n.py train build/yolov8n/data build/yolov8n

``-P``: this folder would otherwise shadow the standard library's ``profile``. The second
writes ``build/yolov8n/yolov8n-shapes.onnx`` with ``classes.txt`` and a ``card.yaml`` declaring
Ultralytics' own preprocessing: ``--model build/yolov8n`` names it. The ``train`` step imports
nothing of vidpipe.
"""

from __future__ import annotations

import sys
from pathlib import Path

TRAIN_IMAGES = 1200
VAL_IMAGES = 120
EPOCHS = 12
TRAIN_SIZE = 320  # square training size; exported at EXPORT_SIZE
EXPORT_SIZE = 640


def write_dataset(folder: Path, seed: int = 0) -> Path:
    """The shapes scenes as an Ultralytics (YOLO format) dataset; its data.yaml."""
    import cv2
    import numpy as np

    from models.data import training_image
    from models.scene import CLASSES

    for split, count in (("train", TRAIN_IMAGES), ("val", VAL_IMAGES)):
        images, labels = folder / "images" / split, folder / "labels" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng([seed, 7, split == "val"])
        for index in range(count):
            image, truth = training_image(rng)
            height, width = image.shape[:2]
            cv2.imwrite(str(images / f"{index:05d}.png"), image[:, :, ::-1])  # RGB -> BGR
            rows = [f"{int(c)} {(x1 + x2) / 2 / width:.6f} {(y1 + y2) / 2 / height:.6f} "
                    f"{(x2 - x1) / width:.6f} {(y2 - y1) / height:.6f}"
                    for x1, y1, x2, y2, c in truth.boxes]
            (labels / f"{index:05d}.txt").write_text("\n".join(rows) + ("\n" if rows else ""))
    names = "".join(f"  {i}: {name}\n" for i, name in enumerate(CLASSES))
    data = folder / "data.yaml"
    data.write_text(f"path: {folder.resolve()}\ntrain: images/train\nval: images/val\n"
                    f"names:\n{names}")
    return data


def train_and_export(data_folder: Path, out: Path) -> Path:
    """YOLOv8n from its architecture file, trained on the dataset, exported to ONNX."""
    from ultralytics import YOLO

    model = YOLO("yolov8n.yaml")
    model.train(data=str(data_folder / "data.yaml"), epochs=EPOCHS, imgsz=TRAIN_SIZE,
                batch=16, workers=2, device="cpu", project=str(out.resolve()), name="train",
                exist_ok=True, plots=False, amp=False, verbose=False)
    return export(out / "train" / "weights" / "best.pt", data_folder, out)


def export(weights: Path, data_folder: Path, out: Path) -> Path:
    """Trained weights to ONNX at ``EXPORT_SIZE``, with its classes and card beside it."""
    import shutil

    import yaml
    from ultralytics import YOLO

    names = yaml.safe_load((data_folder / "data.yaml").read_text())["names"]
    exported = Path(YOLO(str(weights)).export(format="onnx", imgsz=EXPORT_SIZE, dynamic=False,
                                              simplify=True, opset=17))
    target = out / "yolov8n-shapes.onnx"
    shutil.copyfile(exported, target)
    classes = [names[i] for i in sorted(names)]
    (out / "classes.txt").write_text("".join(f"{name}\n" for name in classes))
    # The preprocessing Ultralytics gives it: its LetterBox (bilinear, centred, grey 114) and
    # RGB scaled to 0..1; its predictor's default thresholds (conf 0.25, iou 0.7).
    card = {"name": "yolov8n-shapes", "file": target.name,
            "input": {"name": "images", "width": EXPORT_SIZE, "height": EXPORT_SIZE,
                      "layout": "NCHW", "dtype": "float32", "color": "RGB",
                      "resize": "letterbox", "interpolation": "bilinear", "pad_value": 114,
                      "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]},
            "output": {"format": "yolov8", "score_threshold": 0.25, "iou_threshold": 0.7,
                       "max_detections": 300},
            "classes": classes,
            "description": f"YOLOv8n (Ultralytics), {EPOCHS} epochs on the shapes scenes, "
                           "exported by Ultralytics for the runtime bench"}
    (out / "card.yaml").write_text(yaml.safe_dump(card, sort_keys=False))
    return target


if __name__ == "__main__":
    step, *paths = sys.argv[1:]
    if step == "dataset":
        print(write_dataset(Path(paths[0])))
    elif step == "train":
        print(train_and_export(Path(paths[0]), Path(paths[1])))
    elif step == "export":  # weights of a run cut short (its last.pt or best.pt)
        print(export(Path(paths[0]), Path(paths[1]), Path(paths[2])))
    else:
        raise SystemExit(f"usage: {sys.argv[0]} dataset FOLDER | train DATA_FOLDER OUT | "
                         "export WEIGHTS DATA_FOLDER OUT")
