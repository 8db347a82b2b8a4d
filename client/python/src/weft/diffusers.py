"""weft.diffusers — diffusers transformers served by weftd.

    from diffusers import FluxPipeline, WanPipeline
    from weft.diffusers import WeftFluxTransformer, WeftWanTransformer

    transformer = WeftFluxTransformer("ipc:///run/weftd/weftd.sock", model="flux-dev",
                                      path="flux/dev/transformer",      # under model_root
                                      config="/srv/models/flux/dev/transformer")
    pipe = FluxPipeline.from_pretrained("/srv/models/flux/dev", transformer=transformer)
    image = pipe("a tabby cat", num_inference_steps=28).images[0]

    wan = WeftWanTransformer("ipc:///run/weftd/weftd.sock", "wan-1.3b",
                             path="wan/1.3b/transformer")
    pipe = WanPipeline.from_pretrained("/srv/models/wan/1.3b", transformer=wan)

WeftFluxTransformer stands where FluxPipeline expects a
FluxTransformer2DModel, WeftWanTransformer where WanPipeline (and
WanImageToVideoPipeline) expects a WanTransformer3DModel; Wan 2.2's two
experts are two WeftWanTransformers, each its own resident model, passed
as `transformer` and `transformer_2` (the pipeline's boundary_ratio picks
one per step). Each is a diffusers ModelMixin with no parameters that
carries the model's config (what the pipeline reads: in_channels,
patch_size, image_dim, ...), and its forward sends the step's tensors as
one forward job to the model resident in weftd (checked against the
model's schema before it is sent) and returns what diffusers' forward
returns (a Transformer2DModelOutput, or a 1-tuple with
return_dict=False). Everything else of the pipeline (text and image
encoders, tokenizers, scheduler, VAE, the denoising loop) stays in Python.

What weftd does not serve is refused with NotServedError, never ignored:
attention kwargs other than a LoRA `scale` of 1.0 (LoRA scales,
IP-adapter embeddings, attention-processor arguments), FLUX's controlnet
residuals; for Wan, image embeddings (encoder_hidden_states_image) for a
model whose schema does not list them (a text-to-video model).

The model's configuration comes from the daemon (list_models' `config`,
under diffusers' names), so attaching by name is enough:
`WeftFluxTransformer(endpoint, "flux-dev")`. A config given here
(`config=` a mapping, e.g. FluxTransformer2DModel.load_config(dir), or
the path of a config.json or of its model directory; or `model_root=`
with `path=` when the daemon's model root is visible here) is checked
against the daemon's: a difference is an error. Keys the daemon does not
report (Wan's eps) come from the config given here, else, like keys the
config lacks, from diffusers' defaults.
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
from diffusers import FluxTransformer2DModel, WanTransformer3DModel
from diffusers.configuration_utils import ConfigMixin
from diffusers.models.modeling_outputs import Transformer2DModelOutput
from diffusers.models.modeling_utils import ModelMixin

from .client import Client, JobResult, ModelConfig, ModelInfo, ModelSchema, TpRule

log = logging.getLogger(__name__)

_WEFT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
ConfigSource = Union[Mapping[str, Any], str, "os.PathLike[str]"]


class NotServedError(NotImplementedError):
    """The pipeline asked for something weftd's forward of the model does
    not do (LoRA scales, controlnet residuals, attention-processor kwargs,
    inputs the model's schema does not list)."""


def _defaults(cls: type) -> Dict[str, Any]:
    """The arguments of diffusers' model class `cls` and their defaults."""
    sig = inspect.signature(cls.__init__)    # type: ignore[misc]
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


def _read_config(src: ConfigSource, cls: type) -> Dict[str, Any]:
    """A config (a mapping, a config.json or its directory) as `cls`'s
    arguments: every key one of them, the others at their defaults, lists
    as tuples (as diffusers' constructors take them)."""
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
    known = _defaults(cls)
    out = dict(known)
    for k, v in cfg.items():
        if k.startswith("_"):
            continue            # _class_name, _diffusers_version, ...
        if k not in known:
            raise ValueError(f"config key {k!r} is not a {cls.__name__} argument")
        out[k] = tuple(v) if isinstance(v, list) else v
    return out


def _host(t: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """t as weft sends it: a CPU tensor of a weft dtype (`dtype`, else its
    own when it is one, else float32). One that already is passes as it is
    (zero-copy); others are moved / cast once."""
    want = dtype or (t.dtype if t.dtype in _WEFT_DTYPES else torch.float32)
    return t.detach().to(device="cpu", dtype=want)


def _check_attention_kwargs(kwargs: Optional[Mapping[str, Any]], what: str) -> None:
    """An attention-kwargs argument weftd can honour: none, empty, or only
    a LoRA `scale` of 1.0 (which changes nothing without LoRA layers, and
    weftd's models have none). Anything else is NotServedError."""
    if not kwargs:
        return
    rest = sorted(k for k in kwargs if k != "scale")
    scale = kwargs.get("scale", 1.0)
    if rest or scale != 1.0:
        raise NotServedError(
            f"weftd does not serve {what} (got keys {sorted(kwargs)}"
            + ("" if scale == 1.0 else f", scale {scale!r}") + "): LoRA scales, IP-adapter "
            "embeddings and attention-processor arguments need diffusers' own transformer")


class _WeftTransformer(ModelMixin, ConfigMixin):
    """What every transformer served by weftd shares: the connection, the
    resident model (attached or loaded), its config, the attributes a
    pipeline reads of a model, and the refusals of what would need the
    weights here. A subclass names its family and diffusers class and
    writes forward.

    endpoint: the daemon (None: $WEFT_ENDPOINT, else libweft's default).
    model: the resident model's name in weftd (None: the family's name,
      "flux" or "wan").
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
      daemon whose devices take it (UnsupportedError otherwise); "default"
      as the inputs' dtypes.

    After each forward, `last_result` holds how the job ran (JobResult).
    """

    config_name = "config.json"
    _supports_gradient_checkpointing = False
    #: weftd's family of the model (ModelInfo.family)
    _family = ""
    #: the diffusers class this stands for (its arguments are the config)
    _diffusers_class: type = ModelMixin
    #: whether forward needs the model's schema (a daemon of protocol 2)
    _needs_schema = False

    def __init__(self, endpoint: Optional[str] = None, model: Optional[str] = None, *,
                 path: Optional[str] = None, config: Optional[ConfigSource] = None,
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
        local = _read_config(config, self._diffusers_class) if config is not None else None
        self.model_name = model or self._family
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
        if self._needs_schema and self.model_info.schema is None:
            raise ValueError(f"weftd at {self._client.endpoint} reports no forward schema "
                             f"for model {self.model_name!r} (a daemon before protocol "
                             "version 2)")
        self._schema: Optional[ModelSchema] = self.model_info.schema
        self.register_to_config(**self._config_of(local))

    @classmethod
    def _from_daemon(cls, theirs: ModelConfig) -> Dict[str, Any]:
        """The daemon's config entries as the diffusers class's arguments
        (a family whose entries differ in kind, e.g. a flag for a string,
        maps them here)."""
        return dict(theirs)

    def _config_of(self, local: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        """The daemon's config of the model over `local` (checked against
        it) or over diffusers' defaults."""
        theirs = self.model_info.config
        if theirs is None:
            if local is None:
                raise ValueError(
                    f"weftd at {self._client.endpoint} reports no config for model "
                    f"{self.model_name!r} (a daemon before weft 0.4): pass config= (a "
                    "mapping, a config.json or its directory), or model_root= with path=")
            return local
        daemon = _read_config(self._from_daemon(theirs), self._diffusers_class)
        reported = {k for k in daemon if k in theirs}
        if local is not None:
            differ = sorted(k for k in reported if
                            _norm(local[k], local) != _norm(daemon[k], daemon))
            if differ:
                raise ValueError(
                    f"the config given for {self.model_name!r} differs from the one weftd "
                    f"serves in {', '.join(differ)}: "
                    + "; ".join(f"{k} {local[k]!r} here, {daemon[k]!r} in weftd"
                                for k in differ))
            return {**local, **{k: daemon[k] for k in reported}}
        return daemon

    def _attach_or_load(self, path: Optional[str], tp_plan: Optional[Mapping[str, TpRule]],
                        sharded: bool,
                        progress: Optional[Callable[[ModelInfo], None]]) -> ModelInfo:
        family = self._family
        resident = {m.name: m for m in self._client.list_models()}
        m = resident.get(self.model_name)
        if m is not None:
            if path is not None and m.path != path:
                raise ValueError(f"weftd already holds a model {self.model_name!r} from "
                                 f"{m.path!r}, not {path!r}: unload it or pick another name")
            if m.state != "ready":
                raise RuntimeError(f"model {self.model_name!r} is {m.state} in weftd")
            if m.family != family:
                raise ValueError(f"model {self.model_name!r} is of family {m.family!r}, "
                                 f"not {family}")
            return m
        if path is None:
            raise ValueError(f"weftd holds no model {self.model_name!r} (it holds "
                             f"{sorted(resident) or 'none'}): pass path= to load one")
        m = self._client.load_model(self.model_name, path, tp_plan=tp_plan,
                                    weights_already_sharded=sharded, progress=progress)
        if m.family != family:
            raise ValueError(f"{path!r} holds a model of family {m.family!r}, not {family} "
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
    def cache_context(self, name: str, **kwargs: Any) -> Iterator[None]:
        """Pipelines wrap each call in one (diffusers' CacheMixin, with the
        step's index and sigma); weft has no step caches: nothing to do."""
        yield

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """Refused: the weights are loaded by weftd, not here. Construct it
        and pass it to the pipeline's from_pretrained."""
        raise NotServedError(f"{cls.__name__} is not loaded with from_pretrained: "
                             f"construct it, {cls.__name__}(endpoint, model, path="
                             "'DIR under the daemon's model_root', config='local DIR or "
                             "config.json'), and pass it to the pipeline's from_pretrained("
                             "..., transformer=...)")

    def save_pretrained(self, *args: Any, **kwargs: Any) -> None:
        """Refused: the weights live in weftd, not here (saving would write
        an empty checkpoint). Save the model directory weftd loaded."""
        raise NotServedError(f"{type(self).__name__} holds no weights (they are resident "
                             f"in weftd as {self.model_name!r}): save the model directory "
                             "weftd loaded instead")

    def unload(self) -> None:
        """Unload the model from weftd (other users of it lose it too)."""
        self._client.unload_model(self.model_name)

    def close(self) -> None:
        """Close the connection (the model stays resident)."""
        self._client.close()

    def _result(self, sample: torch.Tensor, device: torch.device, return_dict: bool
                ) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """The forward's output as diffusers returns it, on the inputs'
        device."""
        if device.type != "cpu":
            sample = sample.to(device)
        if not return_dict:
            return (sample,)
        return Transformer2DModelOutput(sample=sample)


class WeftFluxTransformer(_WeftTransformer):
    """diffusers' FluxTransformer2DModel, served by weftd (the arguments
    are _WeftTransformer's)."""

    _family = "flux"
    _diffusers_class = FluxTransformer2DModel

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
        _check_attention_kwargs(joint_attention_kwargs, "joint_attention_kwargs")
        if controlnet_block_samples is not None or controlnet_single_block_samples is not None:
            raise NotServedError("weftd does not serve controlnet residuals "
                                 "(controlnet_block_samples / controlnet_single_block_samples)")
        missing = [n for n, v in (("encoder_hidden_states", encoder_hidden_states),
                                  ("pooled_projections", pooled_projections),
                                  ("timestep", timestep), ("img_ids", img_ids),
                                  ("txt_ids", txt_ids)) if v is None]
        if missing:
            raise ValueError(f"WeftFluxTransformer.forward: {', '.join(missing)} required")
        assert encoder_hidden_states is not None and pooled_projections is not None
        assert timestep is not None and img_ids is not None and txt_ids is not None
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

        act = hidden_states.dtype if hidden_states.dtype in _WEFT_DTYPES else torch.float32
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
            g = _host(g, act)
        p = cfg.patch_size
        out_ch = (cfg.out_channels or cfg.in_channels) * p * p
        hs = _host(hidden_states, act)
        output = torch.empty((hs.shape[0], hs.shape[1], out_ch), dtype=act)
        r = self._client.forward(self.model_name, hs, _host(encoder_hidden_states),
                                 _host(pooled_projections), _host(t, act), _host(img_ids),
                                 _host(txt_ids), g, out=output, precision=self._precision)
        self.last_result = r.result
        return self._result(output, hidden_states.device, return_dict)


def _wan_inputs(schema: ModelSchema, patch_size: Tuple[int, ...],
                hidden_states: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor,
                encoder_hidden_states_image: Optional[torch.Tensor]) -> Dict[str, torch.Tensor]:
    """WanTransformer3DModel.forward's tensors as the named inputs of the
    model's schema, as CPU tensors of weft dtypes.

    timestep: (B) as the pipeline passes it (a scalar or one value for
    every batch entry is expanded to B), or Wan 2.2 TI2V's (B, S), one per
    video token (S = F/p_t * H/p_h * W/p_w). A (B, S) whose rows are each
    one value is sent as `timestep` (B) (diffusers then computes the same
    modulation for every token: TI2V's text-to-video steps), any other as
    the schema's `timestep_tokens`. Always float32: the model's sinusoidal
    embedding computes in float32 from it.
    encoder_hidden_states_image: (B, S_img, image_dim) of Wan 2.1 I2V, or
    FLF2V's (2 B, 257, image_dim) (the first and last frames' tokens of each
    sample in consecutive rows), viewed as the schema's (B, 514, image_dim)
    as diffusers' image embedder views it; sent when the schema lists it,
    else NotServedError.
    """
    act = hidden_states.dtype if hidden_states.dtype in _WEFT_DTYPES else torch.float32
    b = hidden_states.shape[0]
    t = timestep.detach()
    if t.ndim == 0 or (t.ndim == 1 and t.numel() == 1 and b > 1):
        t = t.reshape(1).expand(b)
    name = "timestep"
    if t.ndim == 2:
        if bool((t == t[:, :1]).all()):
            t = t[:, 0]
        elif schema.input("timestep_tokens") is not None:
            name = "timestep_tokens"
        else:
            raise NotServedError(
                f"this model's schema takes no per-token timestep, and a "
                f"{tuple(t.shape)} timestep whose values differ between tokens was given")
    inputs = {"hidden_states": _host(hidden_states, act),
              name: _host(t, torch.float32),
              "encoder_hidden_states": _host(encoder_hidden_states)}
    if encoder_hidden_states_image is not None:
        want = schema.input("encoder_hidden_states_image")
        if want is None:
            raise NotServedError(
                "weftd's Wan forward of this model takes no encoder_hidden_states_image "
                "(image embeddings; its schema takes "
                + ", ".join(x.name for x in schema.inputs) + "): it is not an "
                "image-to-video model")
        img = encoder_hidden_states_image
        fixed = want.shape[1] if want.rank > 1 and isinstance(want.shape[1], int) else 0
        if fixed and img.ndim == 3 and img.shape[1] != fixed:
            img = img.reshape(-1, fixed, img.shape[2])   # FLF2V: (2 B, 257, D) -> (B, 514, D)
        inputs["encoder_hidden_states_image"] = _host(img)
    return inputs


class WeftWanTransformer(_WeftTransformer):
    """diffusers' WanTransformer3DModel, served by weftd (the arguments are
    _WeftTransformer's). For Wan 2.2's two
    experts, make one per resident model and pass them as the pipeline's
    `transformer` and `transformer_2`.

    The inputs a forward sends are decided by the model's schema as the
    daemon reported it at construction (`model_info.schema`):
    encoder_hidden_states_image when the schema lists it, a per-token
    timestep as timestep_tokens (_wan_inputs)."""

    _family = "wan"
    _diffusers_class = WanTransformer3DModel
    _needs_schema = True

    @classmethod
    def _from_daemon(cls, theirs: ModelConfig) -> Dict[str, Any]:
        # weftd reports qk_norm as a flag (its one norm, or none), and
        # diffusers' None of the image fields as 0
        cfg = dict(theirs)
        if isinstance(cfg.get("qk_norm"), bool):
            cfg["qk_norm"] = "rms_norm_across_heads" if cfg["qk_norm"] else None
        for k in ("image_dim", "added_kv_proj_dim", "pos_embed_seq_len"):
            if cfg.get(k) == 0:
                cfg[k] = None
        return cfg

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor,
                encoder_hidden_states: torch.Tensor,
                encoder_hidden_states_image: Optional[torch.Tensor] = None,
                return_dict: bool = True,
                attention_kwargs: Optional[Dict[str, Any]] = None,
                ) -> Union[Tuple[torch.Tensor], Transformer2DModelOutput]:
        """WanTransformer3DModel.forward's arguments and result, computed by
        weftd: one forward job on the resident model. hidden_states (B,
        in_channels, F, H, W), timestep (B) (or (B, S), see _wan_inputs),
        encoder_hidden_states (B, S_txt, text_dim); the result's sample is
        (B, out_channels, F, H, W) in hidden_states' dtype."""
        _check_attention_kwargs(attention_kwargs, "attention_kwargs")
        cfg = self.config
        schema = self._schema
        assert schema is not None      # _needs_schema: checked at construction
        inputs = _wan_inputs(schema, tuple(cfg.patch_size), hidden_states, timestep,
                             encoder_hidden_states, encoder_hidden_states_image)
        hs = inputs["hidden_states"]
        b, _, f, h, w = hs.shape
        out_name = schema.outputs[0].name
        output = torch.empty((b, cfg.out_channels or cfg.in_channels, f, h, w), dtype=hs.dtype)
        r = self._client.forward(self.model_name, inputs, out={out_name: output},
                                 precision=self._precision)
        self.last_result = r.result
        return self._result(output, hidden_states.device, return_dict)
