"""DataProto: the one data currency between the driver and the workers.

A ``DataProto`` bundles three things that travel together through an RL step:

- ``batch``: a ``tensordict.TensorDict`` whose tensors share the leading batch dimension ``N``
  (e.g. ``input_ids [N, seq_len]``, ``response_mask [N, response_len]``);
- ``non_tensor_batch``: a dict of numpy arrays (usually ``dtype=object``) of length ``N`` holding per-sample
  python values (``uid``, ``data_source``, ``reward_model`` dicts, ...);
- ``meta_info``: a plain dict of batch-level values (``eos_token_id``, ``temperature``, ``metrics``, ...).

Every row operation (index, slice, chunk, repeat, reorder, concat) is applied to ``batch`` and
``non_tensor_batch`` together, so the i-th tensor row and the i-th python value always describe the same sample.
Names and semantics follow open-source verl's ``verl.protocol`` so existing driver and worker code carries over.

The code lives in six modules: ``data_proto`` (DataProto, DataProtoItem), ``persistence`` (save / load, pickling,
size summaries), ``unions`` (union helpers), ``padding`` (pad / unpad / collate), ``future`` (DataProtoFuture) and
``errors`` (DataProtoError); every name is importable from ``verl.protocol`` as in verl.
"""

from __future__ import annotations

from verl.protocol.batch_utils import (
    all_gather_data_proto,
    deserialize_single_tensor,
    deserialize_tensordict,
    fold_batch_dim,
    list_of_dict_to_dict_of_list,
    serialize_single_tensor,
    serialize_tensordict,
    unfold_batch_dim,
)
from verl.protocol.config import DataProtoConfig
from verl.protocol.data_proto import DataProto, DataProtoItem
from verl.protocol.errors import DataProtoError
from verl.protocol.future import DataProtoFuture
from verl.protocol.padding import collate_fn, pad_dataproto_to_divisor, unpad_dataproto
from verl.protocol.unions import union_numpy_dict, union_tensor_dict, union_two_dict

__all__ = [
    "DataProto",
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoItem",
    "DataProtoFuture",
    "all_gather_data_proto",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
    "unpad_dataproto",
]
