"""The report's charts: matplotlib figures rendered to inline SVG that follows the page's colours.

matplotlib is an optional extra (`report`): `require_plotting` says how to add it to this installation.
Text stays text in the SVG (`svg.fonttype: none`), so it is small and takes the page font. Axes
and labels are drawn in placeholder colours that become CSS variables, so one SVG reads well in
light and dark mode. Every function takes plain numbers from `data` and returns an SVG string.
"""

from __future__ import annotations

import html
import importlib.util
import io
import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError
from ...install_hints import install_hint
from .data import Distribution, GroupAccuracy, ToolRounds, histogram

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Placeholder colours replaced by CSS variables after rendering (see the page's stylesheet).
_FG, _MUTED, _GRID = "#010203", "#040506", "#070809"
_THEME = {_FG: "var(--fg)", _MUTED: "var(--muted)", _GRID: "var(--grid)"}
CORRECT_COLOR, WRONG_COLOR, BAR_COLOR = "#2da44e", "#e5534b", "#4c8ed9"
# Mid-tone colours that stay readable on a light and on a dark page (matplotlib's tab10).
SERIES_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
WIDTH = 5.6  # inches; the SVG scales to its column
LEFT, RIGHT, BOTTOM, TOP = 0.6, 0.15, 0.45, 0.1  # default margins, inches
CHAR_WIDTH = 0.068  # inches per character of a 9 pt DejaVu Sans label, a little generous
MIN_DISCRETE_SPAN = 8  # a histogram of whole numbers spans at least this many values
_RC: dict[str, Any] = {
    "svg.fonttype": "none",
    "text.parse_math": False,
    "font.size": 9,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # matplotlib ships it, so the layout matches what it measured
    "text.color": _FG,
    "axes.labelcolor": _FG,
    "axes.edgecolor": _MUTED,
    "xtick.color": _MUTED,
    "ytick.color": _MUTED,
    "xtick.labelcolor": _FG,
    "ytick.labelcolor": _FG,
    "axes.facecolor": "none",
    "figure.facecolor": "none",
    "savefig.facecolor": "none",
    "savefig.transparent": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "grid.color": _GRID,
    "legend.frameon": False,
    "hatch.color": _FG,
}


def plotting_available() -> bool:
    """True when matplotlib can be imported."""
    return importlib.util.find_spec("matplotlib") is not None


def require_plotting() -> None:
    """Raise ConfigError with the install command when matplotlib is missing."""
    if not plotting_available():
        raise ConfigError(
            f"the HTML report draws its charts with matplotlib, which is not installed; "
            f"run: {install_hint('report')}"
        )


def accuracy_chart(groups: Sequence[GroupAccuracy], *, salt: str) -> str:
    """Horizontal bars: accuracy of each group, labelled with correct/questions."""
    values = [100 * g.accuracy for g in groups]

    def draw(ax: Axes) -> None:
        ax.barh(range(len(groups)), values, color=BAR_COLOR, height=0.7)
        for i, g in enumerate(groups):
            # Beside the bar, in the right margin when the bar is full: never over the bar.
            ax.text(
                values[i] + 1,
                i,
                f"{g.correct}/{g.questions} · {values[i]:.1f}%",
                va="center",
                fontsize=8,
                clip_on=False,
            )
        _category_axis(ax, labels)
        ax.set_xlim(0, 100)
        ax.set_xticks([0, 25, 50, 75, 100])
        ax.set_xlabel("execution accuracy (%)")

    labels = [f"{g.label} ({g.questions})" for g in groups]
    widest = max((len(f"{g.correct}/{g.questions} · 100.0%") for g in groups), default=10)
    return _render(
        _bars_height(len(groups)),
        salt,
        f"accuracy of {len(groups)} groups",
        draw,
        left=_label_margin(labels),
        right=0.1 + CHAR_WIDTH * 0.9 * widest,
    )


def counts_chart(counts: Mapping[str, int], *, salt: str, xmax: int | None = None) -> str:
    """Horizontal bars: how many episodes fall in each category."""
    labels = list(counts)
    values = [counts[k] for k in labels]
    top = max(xmax or 0, *values, 1)
    total = sum(values) or 1

    def draw(ax: Axes) -> None:
        ax.barh(range(len(labels)), values, color=BAR_COLOR, height=0.7)
        for i, v in enumerate(values):
            ax.text(v + top * 0.01, i, f"{v} · {100 * v / total:.1f}%", va="center", fontsize=8)
        _category_axis(ax, labels)
        ax.set_xlim(0, top * 1.25)
        ax.xaxis.set_major_locator(_whole_numbers())
        ax.set_xlabel("episodes")

    label = "episodes: " + ", ".join(f"{k} {v}" for k, v in counts.items())
    return _render(_bars_height(len(labels)), salt, label, draw, left=_label_margin(labels))


def histogram_chart(dist: Distribution, edges: Sequence[float], *, salt: str, ymax: int | None = None) -> str:
    """Stacked histogram of one per-episode number: right episodes, then wrong ones on top."""
    right, wrong = histogram(dist.correct, edges), histogram(dist.wrong, edges)
    gap = 0.1 if dist.discrete else 0.0  # whole numbers: separate bars, one per value
    lefts = [e + gap for e in edges[:-1]]
    widths = [b - a - 2 * gap for a, b in itertools.pairwise(edges)]
    top = max([ymax or 0, *(a + b for a, b in zip(right, wrong, strict=True)), 1])

    def draw(ax: Axes) -> None:
        ax.bar(lefts, right, width=widths, align="edge", color=CORRECT_COLOR, label="correct", edgecolor="none")
        ax.bar(
            lefts,
            wrong,
            width=widths,
            bottom=right,
            align="edge",
            color=WRONG_COLOR,
            label="wrong",
            edgecolor="none",
        )
        ax.set_ylim(0, top * 1.1)
        ax.set_xlabel(dist.unit)
        ax.set_ylabel("episodes")
        if dist.discrete:
            centres = [e + 0.5 for e in edges[:-1]]
            ax.set_xticks(centres[:: max(1, len(centres) // 12)])
            pad = max(0.0, (MIN_DISCRETE_SPAN - (edges[-1] - edges[0])) / 2)  # one value: not one wide bar
            ax.set_xlim(edges[0] - pad, edges[-1] + pad)
        else:
            ax.xaxis.set_major_locator(_ticks(6))
        ax.yaxis.set_major_locator(_whole_numbers())
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncols=2, fontsize=8, borderaxespad=0.2)
        ax.grid(axis="y", linewidth=0.5)
        ax.set_axisbelow(True)

    label = f"{dist.unit}: {len(dist.correct)} correct and {len(dist.wrong)} wrong episodes"
    return _render(2.5, salt, label, draw, right=0.3, top=0.3)


def tool_rounds_chart(tools: ToolRounds, *, salt: str, ymax: int | None = None) -> str:
    """Stacked bars: calls per round, one colour per tool."""
    x = list(range(len(tools.rounds)))

    def draw(ax: Axes) -> None:
        bottom = [0] * len(x)
        for i, tool in enumerate(tools.tools):
            heights = [tools.counts.get((r, tool), 0) for r in tools.rounds]
            ax.bar(
                x,
                heights,
                bottom=bottom,
                width=0.7,
                label=_short(tool, 24),
                color=SERIES_COLORS[i % len(SERIES_COLORS)],
            )
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_xticks(x, [f"round {r}" if r.isdigit() else r for r in tools.rounds])
        ax.set_ylim(0, max([ymax or 0, *bottom, 1]) * 1.05)
        ax.yaxis.set_major_locator(_whole_numbers())
        ax.set_ylabel("tool calls")
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
        ax.grid(axis="y", linewidth=0.5)
        ax.set_axisbelow(True)

    return _render(2.8, salt, f"tool calls by round over {tools.traced} traced episodes", draw, right=1.5)


def tallest_bin(dists: Sequence[Distribution], edges: Sequence[float]) -> int:
    """The highest stacked bar any of these distributions reaches with these edges."""
    return max(
        (
            max(a + b for a, b in zip(histogram(d.correct, edges), histogram(d.wrong, edges), strict=True))
            for d in dists
        ),
        default=0,
    )


# ---- matplotlib plumbing ----------------------------------------------------------------


def _whole_numbers() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _ticks(count: int) -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(count)


def _bars_height(bars: int) -> float:
    return BOTTOM + TOP + 0.24 * max(bars, 1)


def _label_margin(labels: Sequence[str]) -> float:
    # Fixed margins instead of a layout engine: it would draw every figure twice to measure it.
    return 0.15 + CHAR_WIDTH * max((len(_short(label)) for label in labels), default=4)


def _category_axis(ax: Axes, labels: Sequence[str]) -> None:
    ax.set_yticks(range(len(labels)), [_short(label) for label in labels])
    ax.invert_yaxis()  # first category on top
    ax.tick_params(axis="y", length=0)


def _short(label: str, limit: int = 40) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


_SVG_START = re.compile(r"^.*?(?=<svg)", re.DOTALL)
_SIZE = re.compile(r'<svg([^>]*?) width="[^"]*" height="[^"]*"')
_ID = re.compile(r' id="([^"]*)"')
_REFERENCE = re.compile(r'(?:url\(#|href="#)([^)"]+)')
_DROP = re.compile(r"<metadata>.*?</metadata>\s*|<defs>\s*<style[^>]*>.*?</style>\s*</defs>\s*", re.DOTALL)


def _render(
    height: float,
    salt: str,
    label: str,
    draw: Callable[[Axes], None],
    *,
    left: float = LEFT,
    right: float = RIGHT,
    top: float = TOP,
) -> str:
    """Draw on one axes under the report's style; the figure as an inline <svg> element.

    No XML prologue or metadata, no fixed size (it scales to its column), theme colours as CSS
    variables. `salt` keeps the ids of clip paths unique across the charts of one page.
    """
    import matplotlib
    from matplotlib.figure import Figure

    buffer = io.StringIO()
    style: dict[Any, Any] = {**_RC, "svg.hashsalt": salt}  # matplotlib types its keys as literals
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(WIDTH, height))
        left = min(left, WIDTH / 2)
        fig.subplots_adjust(
            left=left / WIDTH, right=1 - right / WIDTH, bottom=BOTTOM / height, top=1 - top / height
        )
        draw(fig.add_subplot())
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    text = _DROP.sub("", _SVG_START.sub("", buffer.getvalue(), count=1))
    used = set(_REFERENCE.findall(text))
    text = _ID.sub(lambda m: m.group(0) if m.group(1) in used else "", text)
    text = _SIZE.sub(lambda m: f'<svg{m.group(1)} role="img" aria-label="{html.escape(label)}"', text, count=1)
    for placeholder, variable in _THEME.items():
        text = text.replace(placeholder, variable)
    return text.strip()
