"""weft.diffusers — a FLUX transformer served by weftd, for diffusers.

    from diffusers import FluxPipeline
    from weft.diffusers import WeftFluxTransformer

    transformer = WeftFluxTransformer("ipc:///run/weftd/weftd.sock", model="flux-dev",
                                      path="flux/dev/transformer",      # under model_root
                                      config="/srv/models/flux/dev/transformer")
    pipe = FluxPipeline.from_pretrained("/srv/models/flux/dev", transformer=transformer)
    image = pipe("a tabby cat", num_inference_steps=28).images[0]

WeftFluxTransformer stands where FluxPipeline expects a
FluxTransformer2DModel: it is a diffusers ModelMixin with no parameters
that carries the model's config (in_channels, guidance_embeds,
joint_attention_dim, ...: what the pipeline reads), and its forward sends
the step's tensors as one forward job (Client.forward, FLUX's form of
Client.forward_named, checked against the model's schema before it is
sent) to the model resident in weftd and
returns what diffusers' forward returns (a Transformer2DModelOutput, or a
1-tuple with return_dict=False). Everything else of the pipeline (text
encoders, tokenizers, scheduler, VAE, the denoising loop) stays in Python.

What weftd does not serve is refused with NotServedError, never ignored:
joint_attention_kwargs with keys (LoRA `scale`, IP-adapter embeddings,
attention-processor arguments), controlnet residuals. An empty
joint_attention_kwargs (FluxPipeline always passes one) is fine.

The model's configuration comes from the daemon (list_models' `config`,
weft 0.4 and later; FLUX's entries are FluxTransformer2DModel's
arguments), so attaching by name is enough:
`WeftFluxTransformer(endpoint, "flux-dev")`. A config given here
(`config=` a mapping, e.g. FluxTransformer2DModel.load_config(dir), or
the path of a config.json or of its model directory; or `model_root=`
with `path=` when the daemon's model root is visible here) is checked
against the daemon's: a difference is an error. Keys a config lacks take
diffusers' defaults.
"""
from __future__ import annotations

import contextlib
import inspect
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple, Union

import torch
from diffusers import FluxTransformer2DModel
from diffusers.configuration_utils import ConfigMixin
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.modeling_utils import ModelMixin

from .client import Client, JobResult, ModelInfo, TpRule

log = logging.getLogger(__name__)

_WEFT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class NotServedError(NotImplementedError):
    """The pipeline asked for something weftd's FLUX forward does not do
    (LoRA scales, controlnet residuals, attention-processor kwargs)."""


def _flux_defaults() -> Dict[str, Any]:
    sig = inspect.signature(FluxTransformer2DModel.__init__)
    return {k: p.default for k, p in sig.parameters.items()
            if k != "self" and p.default is not inspect.Parameter.empty}


def _norm(v: Any, cfg: Mapping[str, Any]) -> Any:
    """A config value compared as the model uses it (lists as tuples; an
    out_channels of None is in_channels)."""
    if isinstance(v, list):
        return tuple(v)
    if v is None:
        return cfg.get("in_channels")
    return v


def _read_config(src: Union[Mapping[str, Any], str, "os.PathLike[str]"]) -> Dict[str, Any]:
    if isinstance(src, Mapping):
        cfg = dict(src)
    else:
        p = Path(src)
        if p.is_dir():
            p = p / "config.json"
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
        if not isinstance(cfg, dict):
            raise ValueError(f"{p}: not a JSON object")
    known = _flux_defaults()
    out = dict(known)
    for k, v in cfg.items():
        if k.startswith("_"):
            continue            # _class_name, _diffusers_version, ...
        if k not in known:
            raise ValueError(f"config key {k!r} is not a FluxTransformer2DModel argument")
        out[k] = v
    if isinstance(out.get("axes_dims_rope"), list):
        out["axes_dims_rope"] = tuple(out["axes_dims_rope"])
    return out


class WeftFluxTransformer(ModelMixin, ConfigMixin):
    """diffusers' FluxTransformer2DModel, served by weftd.

    endpoint: the daemon (None: $WEFT_ENDPOINT, else libweft's default).
    model: the resident model's name in weftd.
    path: a model directory under the daemon's model_root: loaded as
      `model` unless a model of that name is already resident from that
      path (then attached). None: attach to a resident `model`.
    config: the model's config (a mapping, or a config.json / its
      directory), checked against the daemon's; None: model_root/path's
      config.json when model_root is given, else the daemon's.
    model_root: the daemon's model root as seen from here (only to find
      config.json).
    tp_plan, weights_already_sharded, progress: as Client.load_model.
    timeout_ms: the connection's reply timeout (a load waits as long as
      reading the checkpoint takes; a forward as long as a step).
    dtype: the dtype the pipeline sees as the transformer's (its latents
      and embeddings come in that dtype; weftd computes as its backend
      does: f32 on the CPU).
    server_key, client_key_file: CURVE keys for a tcp:// endpoint.
    precision: "fp8" runs every forward's attention in fp8 (e4m3) on a
      daemon whose devices take it (Client.forward; UnsupportedError
      otherwise); "default" as the inputs' dtypes.

    After each forward, `last_result` holds how the job ran (JobResult).
    """

    config_name = "config.json"
    _supports_gradient_checkpointing = False

    def __init__(self, endpoint: Optional[str] = None, model: str = "flux", *,
                 path: Optional[str] = None,
                 config: Optional[Union[Mapping[str, Any], str, "os.PathLike[str]"]] = None,
                 model_root: Optional[Union[str, "os.PathLike[str]"]] = None,
                 tp_plan: Optional[Mapping[str, TpRule]] = None,
                 weights_already_sharded: bool = False,
                 progress: Optional[Callable[[ModelInfo], None]] = None,
                 timeout_ms: int = 600_000, dtype: torch.dtype = torch.float32,
                 server_key: Optional[str] = None,
                 client_key_file: Optional[str] = None,
                 precision: str = "default") -> None:
        super().__init__()
        if precision not in ("default", "fp8"):
            raise ValueError(f"precision {precision!r}: 'default' or 'fp8'")
        self._precision = precision
        if dtype not in _WEFT_DTYPES:
            raise ValueError(f"dtype {dtype}: one of float32, float16, bfloat16")
        if config is None and path is not None and model_root is not None:
            config = Path(model_root) / path
        local = _read_config(config) if config is not None else None
        self.model_name = model
        self._dtype = dtype
        self._client = Client(endpoint, timeout_ms, server_key=server_key,
                              client_key_file=client_key_file)
        self._client.hello()
        if not self._client.has_feature("models"):
            raise RuntimeError(f"the daemon at {self._client.endpoint} serves no models "
                               "(no 'models' feature in its hello)")
        self.last_result: Optional[JobResult] = None
        self.model_info = self._attach_or_load(path, tp_plan, weights_already_sharded,
                                               progress)
        self.register_to_config(**self._config_of(local))

    def _config_of(self, local: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """The daemon's config of the model, or `local` checked against it."""
        theirs = self.model_info.config
        if theirs is None:
            if local is None:
                raise ValueError(
                    f"weftd at {self._client.endpoint} reports no config for model "
                    f"{self.model_name!r} (a daemon before weft 0.4): pass config= (a "
                    "mapping, a config.json or its directory), or model_root= with path=")
            return local
        daemon = _read_config(theirs)
        if local is not None:
            differ = sorted(k for k in daemon if k in local and
                            _norm(local[k], daemon) != _norm(daemon[k], daemon))
            if differ:
                raise ValueError(
                    f"the config given for {self.model_name!r} differs from the one weftd "
                    f"serves in {', '.join(differ)}: "
                    + "; ".join(f"{k} {local[k]!r} here, {daemon[k]!r} in weftd"
                                for k in differ))
        return daemon

    def _attach_or_load(self, path: Optional[str], tp_plan: Optional[Mapping[str, TpRule]],
                        sharded: bool,
                        progress: Optional[Callable[[ModelInfo], None]]) -> ModelInfo:
        resident = {m.name: m for m in self._client.list_models()}
        m = resident.get(self.model_name)
        if m is not None:
            if path is not None and m.path != path:
                raise ValueError(f"weftd already holds a model {self.model_name!r} from "
                                 f"{m.path!r}, not {path!r}: unload it or pick another name")
            if m.state != "ready":
                raise RuntimeError(f"model {self.model_name!r} is {m.state} in weftd")
            if m.family != "flux":
                raise ValueError(f"model {self.model_name!r} is of family {m.family!r}, "
                                 "not flux")
            return m
        if path is None:
            raise ValueError(f"weftd holds no model {self.model_name!r} (it holds "
                             f"{sorted(resident) or 'none'}): pass path= to load one")
        m = self._client.load_model(self.model_name, path, tp_plan=tp_plan,
                                    weights_already_sharded=sharded, progress=progress)
        if m.family != "flux":
            raise ValueError(f"{path!r} holds a model of family {m.family!r}, not flux "
                             f"(weftd keeps it loaded as {self.model_name!r}; Client."
                             "forward_named serves any family)")
        return m

    # -- what the pipeline reads of a model

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    @property
    def client(self) -> Client:
        """The connection to weftd (for status, reconfigure, ...)."""
        return self._client

    @contextlib.contextmanager
    def cache_context(self, name: str) -> Iterator[None]:
        """FluxPipeline wraps each call in one (diffusers' CacheMixin); weft
        has no step caches: nothing to do."""
        yield

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """Refused: the weights are loaded by weftd, not here. Construct it:
        WeftFluxTransformer(endpoint, model, path=..., config=...)."""
        raise NotServedError("WeftFluxTransformer is not loaded with from_pretrained: "
                             "construct it, WeftFluxTransformer(endpoint, model, path="
                             "'DIR under the daemon's model_root', config='local DIR or "
                             "config.json'), and pass it to FluxPipeline.from_pretrained("
                             "..., transformer=...)")

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        """Refused: the weights live in weftd, not here (saving would write
        an empty checkpoint). Save the model directory weftd loaded."""
        raise NotServedError("WeftFluxTransformer holds no weights (they are resident in "
                             f"weftd as {self.model_name!r}): save the model directory "
                             "weftd loaded instead")

    def unload(self) -> None:
        """Unload the model from weftd (other users of it lose it too)."""
        self._client.unload_model(self.model_name)

    def close(self) -> None:
        """Close the connection (the model stays resident)."""
        self._client.close()

    # -- the forward

    def forward(self, hidden_states: torch.Tensor,
                encoder_hidden_states: Optional[torch.Tensor] = None,
                pooled_projections: Optional[torch.Tensor] = None,
                timestep: Optional[torch.Tensor] = None,
                img_ids: Optional[torch.Tensor] = None,
                txt_ids: Optional[torch.Tensor] = None,
                guidance: Optional[torch.Tensor] = None,
                joint_attention_kwargs: Optional[Dict[str, Any]] = None,
                controlnet_block_samples: Any = None,
                controlnet_single_block_samples: Any = None,
                return_dict: bool = True,
                controlnet_blocks_repeat: bool = False,
                ) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """FluxTransformer2DModel.forward's arguments and result, computed by
        weftd: one forward job on the resident model."""
        if joint_attention_kwargs:
            raise NotServedError(
                "weftd does not serve joint_attention_kwargs (got keys "
                f"{sorted(joint_attention_kwargs)}): LoRA scales, IP-adapter embeddings and "
                "attention-processor arguments need diffusers' own transformer")
        if controlnet_block_samples is not None or controlnet_single_block_samples is not None:
            raise NotServedError("weftd does not serve controlnet residuals "
                                 "(controlnet_block_samples / controlnet_single_block_samples)")
        missing = [n for n, v in (("encoder_hidden_states", encoder_hidden_states),
                                  ("pooled_projections", pooled_projections),
                                  ("timestep", timestep), ("img_ids", img_ids),
                                  ("txt_ids", txt_ids)) if v is None]
        if missing:
            raise ValueError(f"WeftFluxTransformer.forward: {', '.join(missing)} required")
        cfg = self.config
        if guidance is not None and not cfg.guidance_embeds:
            raise ValueError("guidance given to a model without guidance_embeds")
        if guidance is None and cfg.guidance_embeds:
            raise ValueError("the model has guidance_embeds: pass guidance")
        # diffusers' deprecated 3-D ids: it takes the first batch entry
        if txt_ids.ndim == 3:
            log.warning("Passing `txt_ids` 3d torch.Tensor is deprecated.")
            txt_ids = txt_ids[0]
        if img_ids.ndim == 3:
            log.warning("Passing `img_ids` 3d torch.Tensor is deprecated.")
            img_ids = img_ids[0]

        device = hidden_states.device
        act = hidden_states.dtype if hidden_states.dtype in _WEFT_DTYPES else torch.float32

        def host(t: torch.Tensor, dt: Optional[torch.dtype] = None) -> torch.Tensor:
            # CPU tensors of a weft dtype pass as they are (zero-copy);
            # others are moved / cast once
            want = dt or (t.dtype if t.dtype in _WEFT_DTYPES else torch.float32)
            return t.detach().to(device="cpu", dtype=want)

        batch = hidden_states.shape[0]
        # diffusers casts timestep and guidance to hidden_states' dtype
        # before scaling them by 1000: do the same cast here
        t = timestep.detach()
        if t.ndim == 0:
            t = t.expand(batch)
        g = None
        if guidance is not None:
            g = guidance.detach()
            if g.ndim == 0:
                g = g.expand(batch)
            g = host(g, act)
        p = cfg.patch_size
        out_ch = (cfg.out_channels or cfg.in_channels) * p * p
        hs = host(hidden_states, act)
        output = torch.empty((hs.shape[0], hs.shape[1], out_ch), dtype=act)
        r = self._client.forward(self.model_name, hs, host(encoder_hidden_states),
                                 host(pooled_projections), host(t, act), host(img_ids),
                                 host(txt_ids), g, out=output, precision=self._precision)
        self.last_result = r.result
        sample = output if device.type == "cpu" else output.to(device)
        if not return_dict:
            return (sample,)
        return Transformer2DModelOutput(sample=sample)
