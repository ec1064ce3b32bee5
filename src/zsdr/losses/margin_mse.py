"""Margin-MSE distillation (Hofstätter et al. 2020; DDR's KD loss, docs/methods/ddr.md#margin-mse).

``L = mean_{i,k} [ (s(q_i,d_i+) − s(q_i,d_ik−)) − (t(q_i,d_i+) − t(q_i,d_ik−)) ]²`` with ``t`` the
teacher (cross-encoder) score. No in-batch term.
"""

from __future__ import annotations

import torch


def margin_mse(student_pos: torch.Tensor, student_neg: torch.Tensor,
               teacher_pos: torch.Tensor, teacher_neg: torch.Tensor) -> torch.Tensor:
    """``student_pos``/``teacher_pos``: ``(n,)``; ``student_neg``/``teacher_neg``: ``(n,)`` or ``(n, k)``."""
    if student_neg.dim() == 1:
        student_neg, teacher_neg = student_neg[:, None], teacher_neg[:, None]
    if student_neg.shape != teacher_neg.shape or student_pos.shape != teacher_pos.shape:
        raise ValueError(f"margin_mse: student scores {tuple(student_pos.shape)}/{tuple(student_neg.shape)} and "
                         f"teacher scores {tuple(teacher_pos.shape)}/{tuple(teacher_neg.shape)} differ in shape")
    student = student_pos.float()[:, None] - student_neg.float()
    teacher = teacher_pos.float()[:, None] - teacher_neg.float()
    return ((student - teacher) ** 2).mean()
