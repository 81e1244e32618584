"""The typed config sections: dataclass attributes, a read-only mapping view, extras, conversion from DictConfig."""

from __future__ import annotations

import copy
import pickle

import pytest
from omegaconf import OmegaConf

from verl.base_config import omega_conf_to_dataclass
from verl.workers.config import ActorConfig, ActorRolloutRefConfig, CriticConfig


def test_missing_keys_take_the_dataclass_defaults_and_nested_sections_are_typed():
    cfg = OmegaConf.create({"ppo_epochs": 3, "optim": {"lr": 0.5}})
    actor = omega_conf_to_dataclass(cfg, ActorConfig)
    assert actor.ppo_epochs == 3 and actor.clip_ratio == ActorConfig().clip_ratio
    assert isinstance(actor.optim, type(ActorConfig().optim)) and actor.optim.lr == 0.5
    assert actor.optim.eps == ActorConfig().optim.eps


def test_a_section_reads_like_verls_dictconfig():
    actor = omega_conf_to_dataclass({"clip_ratio": 0.3}, ActorConfig)
    assert actor["clip_ratio"] == 0.3 and actor.get("clip_ratio") == 0.3
    assert actor.get("no_such_key", 7) == 7 and "clip_ratio" in actor and "no_such_key" not in actor
    assert actor.policy_loss.get("loss_mode") == "vanilla"
    assert dict(actor.items())["ppo_epochs"] == 1 and len(actor) == len(list(actor))
    with pytest.raises(KeyError):
        actor["no_such_key"]
    with pytest.raises(AttributeError, match="no key 'no_such_key'"):
        actor.no_such_key  # noqa: B018


def test_extra_keys_are_kept_and_survive_copy_and_pickle():
    cfg = OmegaConf.create({"actor": {"my_coef": 0.25}, "model": {"path": "m"}})
    section = omega_conf_to_dataclass(cfg, ActorRolloutRefConfig)
    assert section.actor.my_coef == 0.25 and section.actor.get("my_coef") == 0.25
    assert section.actor.to_dict()["my_coef"] == 0.25
    for clone in (copy.deepcopy(section), pickle.loads(pickle.dumps(section))):
        assert clone.actor.my_coef == 0.25 and clone.model.path == "m"
        assert clone == section


def test_interpolations_resolve_against_the_whole_config():
    root = OmegaConf.create({"n": 4, "critic": {"rollout_n": "${n}"}})
    assert omega_conf_to_dataclass(root.critic, CriticConfig).rollout_n == 4


def test_an_already_typed_section_is_returned_as_is_and_bad_input_is_named():
    actor = ActorConfig()
    assert omega_conf_to_dataclass(actor, ActorConfig) is actor
    with pytest.raises(TypeError, match="got int"):
        omega_conf_to_dataclass(3, ActorConfig)
