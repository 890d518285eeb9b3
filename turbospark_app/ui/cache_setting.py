"""The Settings dialog's Weight cache group: what the cache holds against its budget, the
budget itself (default, or a size in GiB), the prepacked sessions kept, Clear Cache and Clear
Missing Models (those whose GGUF is gone).

The budget and how many prepacked sessions a model keeps (none by default, the current kernel
mode's, or every mode's) are app-wide and live with the cache's own settings
(`model.weight_cache.budget`, `cache.json` in the config folder), so `turbospark chat` and
`serve` honour them too. They are saved, and the cache trimmed to them (least recently used
first, never what a running model maps), when the dialog's OK is pressed; the Clear buttons act
at once.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QWidget,
)

from ..model.weight_cache import budget, report, store

GIB = 1 << 30


class CacheBox(QGroupBox):
    """The group (owned by the dialog); `apply()` on OK saves the budget and trims the cache."""

    def __init__(self, cache_root: Path, parent: QWidget | None = None) -> None:
        super().__init__("Weight cache", parent)
        self.setObjectName("weightCacheBox")
        self.cache_root = Path(cache_root)
        form = QFormLayout(self)
        self.usage_label = QLabel(self)
        self.usage_label.setObjectName("cacheUsage")
        self.usage_label.setWordWrap(True)
        form.addRow("In use", self.usage_label)
        self.missing_label = QLabel(self)
        self.missing_label.setObjectName("cacheMissing")
        self.missing_label.setWordWrap(True)
        form.addRow(self.missing_label)
        self.default_check = QCheckBox("Default", self)
        self.default_check.setObjectName("cacheBudgetDefault")
        self.default_check.setToolTip(
            "The default: 20 GiB, at most half the disk. 20 GiB keeps a few models ready in the kernel modes you use; on a small or nearly full "
            "disk the cache takes at most half of what is free. The least recently used models "
            "and prepacked sessions go first; the model in use never does.")
        self.budget_spin = QDoubleSpinBox(self)
        self.budget_spin.setObjectName("cacheBudget")
        self.budget_spin.setDecimals(1)
        self.budget_spin.setRange(budget.MIN_BUDGET_BYTES / GIB, 10_000.0)
        self.budget_spin.setSingleStep(1.0)
        self.budget_spin.setSuffix(" GiB")
        row = QHBoxLayout()
        row.addWidget(self.budget_spin, 1)
        row.addWidget(self.default_check)
        form.addRow("Budget", row)
        self.sessions_combo = QComboBox(self)
        self.sessions_combo.setObjectName("cacheSessions")
        # Its long choices must not widen the column past the dialog (the row label was clipped).
        self.sessions_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.sessions_combo.setMinimumContentsLength(16)
        for policy, label in budget.SESSION_POLICY_LABELS.items():
            self.sessions_combo.addItem(label, policy)
        self._initial_policy = budget.session_policy()
        self.sessions_combo.setCurrentIndex(self.sessions_combo.findData(self._initial_policy))
        self.sessions_combo.setToolTip(
            "ONNX Runtime's prepacked weights, saved per kernel mode: ~2.5x the GGUF each on disk, "
            "and a warm load maps them instead of prepacking again (faster load, weights in "
            "file-backed pages). None, the default, keeps the cache near the GGUF's size; on this "
            "project's test machine prepacking at load was as fast as mapping.")
        form.addRow("Prepacked", self.sessions_combo)
        self.details = QPlainTextEdit(self)
        self.details.setObjectName("cacheDetails")
        self.details.setReadOnly(True)
        self.details.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.details.setFixedHeight(self.fontMetrics().lineSpacing() * 4 + 12)
        form.addRow(self.details)
        self.clear_button = QPushButton("Clear Cache", self)
        self.clear_button.setObjectName("clearCache")
        self.clear_button.setToolTip("Delete every prepared weight file now; a model is prepared "
                                     "again from its GGUF when next loaded (the one in use stays)")
        self.clear_button.clicked.connect(self.clear)
        self.clear_missing_button = QPushButton("Clear Missing Models", self)
        self.clear_missing_button.setObjectName("clearMissing")
        self.clear_missing_button.setToolTip(
            "Delete the prepared weights of models whose GGUF is no longer where it was opened "
            "(deleted or moved); the others stay")
        self.clear_missing_button.clicked.connect(lambda: self.clear(missing=True))
        self.result_label = QLabel(self)
        self.result_label.setObjectName("cacheClearResult")
        self.result_label.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addWidget(self.clear_button)
        buttons.addWidget(self.clear_missing_button)
        buttons.addStretch(1)
        form.addRow(buttons)
        form.addRow(self.result_label)
        self.result_label.hide()  # until a Clear says what it freed
        setting = budget.budget_setting()
        self._initial = setting
        self.default_check.setChecked(setting is None)
        self.default_check.toggled.connect(lambda on: self.budget_spin.setEnabled(not on))
        self.budget_spin.setEnabled(setting is not None)
        if setting is not None:
            self.budget_spin.setValue(setting / GIB)
        self.refresh()

    def refresh(self) -> None:
        """Read the cache again: the total against the budget, a line per model and kind."""
        total = store.total_size(self.cache_root)
        root = store.weights_root(self.cache_root)
        in_force = budget.effective_budget(root, total)
        self.usage_label.setText(report.summary(total, in_force, budget.budget_setting() is None))
        if self.default_check.isChecked():
            self.budget_spin.setValue(in_force / GIB)
        models = store.list_models(self.cache_root)
        lines = [line for m in models for line in report.model_lines(m)]
        self.details.setPlainText("\n".join(lines) if lines else "(empty)")
        gone = report.missing_line(models)
        self.clear_missing_button.setEnabled(gone is not None)
        self.missing_label.setText(f"{gone}." if gone else "")
        self.missing_label.setVisible(gone is not None)

    def budget_bytes(self) -> int | None:
        """The budget chosen: None for the default, else bytes."""
        return None if self.default_check.isChecked() else int(self.budget_spin.value() * GIB)

    def clear(self, missing: bool = False) -> None:
        """Clear Cache: everything not mapped by a running model; with `missing` (Clear Missing
        Models) only the models whose GGUF is gone."""
        result = store.clear(self.cache_root, missing=missing)
        kept = (f"; kept {len(result.kept_in_use)} in use by a running model"
                if result.kept_in_use else "")
        self.result_label.setText(f"Freed {report.human_size(result.freed)}{kept}.")
        self.result_label.show()
        self.refresh()

    def apply(self) -> None:
        """OK: save a changed budget or session policy and trim the cache to them."""
        chosen = self.budget_bytes()
        if chosen != self._initial:
            budget.set_budget(chosen)
            self._initial = chosen
        policy = self.sessions_combo.currentData()
        if policy != self._initial_policy:
            budget.set_session_policy(policy)
            self._initial_policy = policy
            store.trim_sessions(self.cache_root, budget.SESSION_POLICIES[policy])
        store.enforce_budget(self.cache_root)
