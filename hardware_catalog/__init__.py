"""Catalog of GPUs, networks, clusters and model presets, each number with its source.

Public API:
- ``get_gpu``, ``get_interconnect``, ``get_cluster``, ``default_cluster_for_gpu``,
  ``list_gpus``, ``list_interconnects``, ``list_clusters`` (hardware.py)
- ``get_model``, ``list_models``, ``model_from_hf_config`` (models.py, hf_config.py)
- ``PlannerInputError``: every bad-input error, one line.
"""

from hardware_catalog.errors import PlannerInputError
from hardware_catalog.schema import ClusterSpec, GPUSpec, InterconnectSpec, MLASpec, ModelSpec, MoESpec
from hardware_catalog.hardware import (
    default_cluster_for_gpu,
    get_cluster,
    get_gpu,
    get_interconnect,
    list_clusters,
    list_gpus,
    list_interconnects,
)
from hardware_catalog.models import get_model, list_models
from hardware_catalog.hf_config import model_from_hf_config

__all__ = [
    "PlannerInputError",
    "ClusterSpec",
    "GPUSpec",
    "InterconnectSpec",
    "MLASpec",
    "ModelSpec",
    "MoESpec",
    "default_cluster_for_gpu",
    "get_cluster",
    "get_gpu",
    "get_interconnect",
    "list_clusters",
    "list_gpus",
    "list_interconnects",
    "get_model",
    "list_models",
    "model_from_hf_config",
]
