"""Saves a PyTorch module as a model file for pstrain, with what TorchScript drops.

    import sys; sys.path.insert(0, "tools")
    from model_file import save
    save(net, "net.pt")                         # torch.jit.script(net)
    save(net, "net.pt", example=(ids, targets))  # or torch.jit.trace(net, example)

A TorchScript file forgets which buffers were registered with persistent=False (Hugging
Face's rotary inv_freq, GPT-2's attention mask): torch.jit.load(...).state_dict() lists
them, so a state dict of the nn.Module (which lacks them) does not load into it, and its
state dict does not load back into the nn.Module (pytorch/pytorch#45012). save() records
their names in the file (extra/pstrain.json, torch.jit.save's _extra_files), and pstrain
then treats them as PyTorch does: out of checkpoints, trained_model.pt and exports, never
asked of --init-from, kept as the module computed them.
"""
import json

import torch


def non_persistent_buffers(module):
    """The state-dict names of every buffer registered with persistent=False in `module`."""
    names = []
    for prefix, sub in module.named_modules():
        for name in sorted(getattr(sub, "_non_persistent_buffers_set", ())):
            names.append(f"{prefix}.{name}" if prefix else name)
    return names


def save(module, path, example=None, facts=None):
    """Scripts `module` (or traces it on `example`, a tuple of inputs) and saves it to `path`
    with its non-persistent buffers (and any other `facts`, a dict) in extra/pstrain.json."""
    scripted = torch.jit.trace(module, example) if example is not None else torch.jit.script(module)
    record = dict(facts or {})
    record["non_persistent_buffers"] = non_persistent_buffers(module)
    torch.jit.save(scripted, path, _extra_files={"pstrain.json": json.dumps(record)})
    return scripted
