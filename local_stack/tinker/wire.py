"""Tinker's protobuf wire format for forward_backward (types from `tinker/proto`).

The SDK sends a `ForwardBackwardRequest` and insists on a `ForwardBackwardOutput` back:
tokens travel as int32 bytes, loss inputs as dense tensors, and the per-datum logprobs as
one batched float32 tensor with byte offsets.
"""

from __future__ import annotations

import math

import numpy as np
from tinker.proto import tinker_public_pb2 as pb

from local_stack.engine.trainer import ForwardBackwardResult, MalformedDatum, TrainingDatum

_TENSOR_DTYPES = {pb.DTYPE_FLOAT32: np.dtype(np.float32), pb.DTYPE_INT64: np.dtype(np.int64)}


def decode_forward_backward(body: bytes) -> pb.ForwardBackwardRequest:
    msg = pb.ForwardBackwardRequest()
    try:
        msg.ParseFromString(body)
    except Exception as e:
        raise ValueError(f"forward_backward body is not a ForwardBackwardRequest: {e}") from e
    return msg


def decode_datum(msg: pb.Datum) -> TrainingDatum:
    """Decode one wire datum: text tokens (int32 bytes) and dense loss-input tensors."""
    tokens = []
    for chunk in msg.model_input:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise MalformedDatum("the local model reads text only (no image or audio chunks)")
        tokens.append(_array(chunk.encoded_text.tokens, np.dtype(np.int32), "model_input"))
    loss_inputs = {}
    for name, tensor in msg.loss_fn_inputs.items():
        what = f"loss_fn_inputs[{name!r:.40}]"
        if tensor.WhichOneof("encoding") == "sparse_csr":
            raise MalformedDatum(f"{what} is sparse; send a dense 1-D tensor")
        expected = np.dtype(np.int64 if name == "target_tokens" else np.float32)
        if _TENSOR_DTYPES.get(tensor.dtype) != expected:
            raise MalformedDatum(f"{what} must be {expected}")
        values = _array(tensor.dense, expected, what)
        shape = list(tensor.shape) or [values.size]
        if min(shape) < 0 or math.prod(shape) != values.size:
            raise MalformedDatum(f"{what} has {values.size} values for shape {shape!s:.80}")
        loss_inputs[name] = values.reshape(shape).copy()  # frombuffer is read-only
    input_ids = np.concatenate(tokens).astype(np.int64) if tokens else np.zeros(0, np.int64)
    return TrainingDatum(input_ids, loss_inputs)


def _array(buffer: bytes, dtype: np.dtype, what: str) -> np.ndarray:
    if len(buffer) % dtype.itemsize:
        raise MalformedDatum(
            f"{what} has {len(buffer)} bytes, not a whole number of {dtype} values"
        )
    return np.frombuffer(buffer, dtype=dtype)


def encode_forward_backward_output(result: ForwardBackwardResult) -> bytes:
    """A protobuf ForwardBackwardOutput: each datum's logprobs, batched, and `loss:sum`."""
    logprobs = [lp.astype(np.float32) for lp in result.logprobs]
    offsets = np.cumsum([0] + [lp.nbytes for lp in logprobs], dtype=np.int64)
    batched = pb.BatchedTensor(
        data=b"".join(lp.tobytes() for lp in logprobs),
        offsets=offsets.tobytes(),
        dtype=pb.DTYPE_FLOAT32,
    )
    record = pb.ArrayRecord(fields={"logprobs": batched}, num_datums=len(logprobs))
    output = pb.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[record],
        metrics={"loss:sum": result.loss_sum},
    )
    return output.SerializeToString()
