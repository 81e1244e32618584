"""Videos of multi-modal rows: the stored forms, frame sampling and size limits -> lists of RGB frames.

A row's videos sit in a column (``data.video_key``, default ``videos``) as a list whose items are any of:

* a list of frames, each frame anything :func:`verl.data.vision_utils.process_image` reads (bytes, a path,
  a PIL image, ``{"bytes": ...}`` / ``{"image": ...}``);
* a path to a directory of frame images (``.png``, ``.jpg``, ...), read in file-name order;
* a path to a video file (``.mp4``, ``.avi``, ...), decoded with OpenCV (``cv2``) when it is installed; without a
  decoder such a row raises ValueError naming the file, the row and the column;
* a dict ``{"video": <one of the above>, "fps": float}`` (the form upstream's ``qwen_vl_utils`` takes), optionally
  with its own ``max_frames``, ``min_pixels`` and ``max_pixels``.

A video longer than ``max_frames`` (``data.video_max_frames``, default 16) keeps that many evenly spaced frames
(first and last included); its sampled frame rate scales with it. Every frame goes through the image size limits
(``data.min_pixels`` / ``data.max_pixels``), and all frames of a video are brought to the first frame's size. The
prompt's ``<video>`` placeholders refer to the videos in order.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from verl.data.vision_utils import process_image

__all__ = [
    "DEFAULT_VIDEO_FPS",
    "DEFAULT_VIDEO_MAX_FRAMES",
    "VIDEO_FILE_EXTENSIONS",
    "Video",
    "is_video_file",
    "process_video",
    "process_videos",
    "sample_indices",
    "video_decoder",
]

# frames per second of a video given as frames without an "fps" (qwen_vl_utils' default sampling rate)
DEFAULT_VIDEO_FPS = 2.0
DEFAULT_VIDEO_MAX_FRAMES = 16
VIDEO_FILE_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpeg", ".mpg", ".flv", ".wmv")
FRAME_FILE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff")


@dataclass
class Video:
    """One decoded video: ``frames`` (RGB ``PIL.Image``, all the same size) sampled at ``fps`` frames per second."""

    frames: list[Any]
    fps: float


def video_decoder() -> str | None:
    """The name of the installed video-file decoder (``"cv2"``, OpenCV) or None when there is none."""
    return "cv2" if importlib.util.find_spec("cv2") is not None else None


def is_video_file(path: Any) -> bool:
    """Whether ``path`` is a string naming a video file by its extension (``.mp4``, ``.avi``, ...)."""
    return isinstance(path, (str, os.PathLike)) and str(path).lower().endswith(VIDEO_FILE_EXTENSIONS)


def sample_indices(total: int, max_frames: int) -> list[int]:
    """``min(total, max_frames)`` evenly spaced indices into ``total`` frames, first and last included."""
    if total <= max_frames:
        return list(range(total))
    if max_frames == 1:
        return [0]
    return [int(round(i)) for i in np.linspace(0, total - 1, max_frames)]


def _local_path(path: Any) -> str:
    path = str(path)
    return path[len("file://") :] if path.startswith("file://") else path


def _decode_file(path: str, max_frames: int, where: str) -> tuple[list[Any], float | None, int]:
    """The sampled frames of a video file, its container frame rate (None if unknown) and its frame count."""
    if path.startswith(("http://", "https://")):
        raise ValueError(f"{where}: remote video {path!r}: only local files and frames are read")
    if not os.path.isfile(path):
        raise ValueError(f"{where}: video file {path!r} does not exist")
    if video_decoder() is None:
        raise ValueError(
            f"{where}: video file {path!r} needs a video decoder and none is installed (OpenCV: pip install "
            "opencv-python-headless); or store the video as a list of frames or a directory of frame images"
        )
    import cv2
    from PIL import Image

    def open_capture() -> Any:
        capture = cv2.VideoCapture(path)
        if not capture.isOpened():
            raise ValueError(f"{where}: video file {path!r} cannot be opened by OpenCV")
        return capture

    # Container frame counts are estimates: count the frames by grabbing them (no decoding), then decode only the
    # kept ones in a second pass.
    capture = open_capture()
    try:
        fps = float(capture.get(cv2.CAP_PROP_FPS)) or None
        total = 0
        while capture.grab():
            total += 1
    finally:
        capture.release()
    keep = set(sample_indices(total, max_frames))
    images = []
    capture = open_capture()
    try:
        for i in range(total):
            if not capture.grab():
                break
            if i in keep:
                ok, frame = capture.retrieve()
                if ok:
                    images.append(Image.fromarray(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)))
    finally:
        capture.release()
    return images, fps, total


def _frame_sources(source: Any, where: str) -> list[Any]:
    if isinstance(source, (str, os.PathLike)):
        path = _local_path(source)
        if os.path.isdir(path):
            names = sorted(n for n in os.listdir(path) if n.lower().endswith(FRAME_FILE_EXTENSIONS))
            if not names:
                raise ValueError(f"{where}: frame directory {path!r} holds no image files {FRAME_FILE_EXTENSIONS}")
            return [os.path.join(path, n) for n in names]
        raise ValueError(
            f"{where}: {path!r} is neither a video file ({', '.join(VIDEO_FILE_EXTENSIONS)}) nor a directory of "
            "frame images"
        )
    if isinstance(source, np.ndarray) and source.dtype == object:
        source = list(source)
    if isinstance(source, (list, tuple)):
        return list(source)
    raise ValueError(
        f"{where}: a video must be a list of frames, a directory of frames, a video file path or a dict with "
        f"'video' (and 'fps'), got {type(source).__name__}"
    )


def process_video(
    video: Any,
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    max_frames: int = DEFAULT_VIDEO_MAX_FRAMES,
    where: str = "video",
) -> Video:
    """One stored video -> a :class:`Video` of at most ``max_frames`` RGB frames of one size.

    ``video``: a list of frames, a directory of frame images, a video file path, or ``{"video": ..., "fps": ...}``
    (a dict's own ``max_frames`` / ``min_pixels`` / ``max_pixels`` win over the arguments). The frame rate is the
    dict's ``fps``, else the file's, else :data:`DEFAULT_VIDEO_FPS`, scaled by ``kept / total`` frames when frames
    are dropped. ``where`` names the row in error messages.
    """
    fps: float | None = None
    if isinstance(video, dict):
        if video.get("video") is None:
            raise ValueError(f"{where}: a video dict needs 'video' (frames or a path), got keys {sorted(video)}")
        # parquet structs hold every key of the column, None where a row has none: None keeps the argument
        fps = video.get("fps")
        max_frames = int(video.get("max_frames") or max_frames)
        min_pixels = min_pixels if video.get("min_pixels") is None else video["min_pixels"]
        max_pixels = max_pixels if video.get("max_pixels") is None else video["max_pixels"]
        video = video["video"]
    if fps is not None and not (isinstance(fps, (int, float)) and fps > 0):
        raise ValueError(f"{where}: 'fps' must be a positive number, got {fps!r}")
    if max_frames < 1:
        raise ValueError(f"{where}: max_frames (data.video_max_frames) must be >= 1, got {max_frames}")
    if is_video_file(video) and not os.path.isdir(_local_path(video)):
        frames, file_fps, total = _decode_file(_local_path(video), max_frames, where)
        fps = fps or file_fps
        if not frames:
            raise ValueError(f"{where}: video file {str(video)!r} decoded to no frames")
    else:
        sources = _frame_sources(video, where)
        total = len(sources)
        if total == 0:
            raise ValueError(f"{where}: the video has no frames")
        frames = [sources[i] for i in sample_indices(total, max_frames)]
    fps = float(fps or DEFAULT_VIDEO_FPS)
    images = [process_image(f, min_pixels, max_pixels, where=f"{where} frame {k}") for k, f in enumerate(frames)]
    size = images[0].size
    images = [img if img.size == size else img.resize(size) for img in images]
    return Video(frames=images, fps=fps * len(images) / total)


def process_videos(
    videos: Sequence[Any],
    min_pixels: int | None = None,
    max_pixels: int | None = None,
    max_frames: int = DEFAULT_VIDEO_MAX_FRAMES,
    where: str = "videos",
) -> list[Video]:
    """:func:`process_video` on each of a row's ``videos`` (errors name ``where`` and the video's position)."""
    return [
        process_video(v, min_pixels, max_pixels, max_frames, where=f"{where} video {k}") for k, v in enumerate(videos)
    ]
