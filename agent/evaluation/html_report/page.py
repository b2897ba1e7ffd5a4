"""The HTML document around the report: styles for light and dark mode, the filter script, the CSP.

The page is one file with nothing to fetch: styles and the one script are inline, charts are
inline SVG. A Content-Security-Policy forbids any network access and lets only our own
script run (by its hash), so even a value that escaped escaping could not run code.
"""

from __future__ import annotations

import base64
import hashlib

from .episodes import esc

STYLE = """
:root{color-scheme:light dark;--bg:#fff;--fg:#1f2328;--muted:#656d76;--grid:#d8dee4;--card:#f6f8fa;
--line:#d0d7de;--ok:#1a7f37;--bad:#cf222e;--mark:#fff1a8;--code:#f3f4f6}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#9198a1;--grid:#30363d;
--card:#161b22;--line:#30363d;--ok:#3fb950;--bad:#f85149;--mark:#5c4a00;--code:#1c2128}}
*{box-sizing:border-box}
body{margin:0 auto;max-width:1400px;padding:1rem 1.5rem 4rem;background:var(--bg);color:var(--fg);
font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
h1{font-size:1.5rem;margin:.5rem 0}h2{font-size:1.2rem;margin:2rem 0 .6rem;border-bottom:1px solid var(--line)}
h3{font-size:1rem;margin:.2rem 0 .4rem}h4{font-size:.85rem;margin:.6rem 0 .3rem;color:var(--muted)}
.muted{color:var(--muted)}.bad{color:var(--bad)}.ok{color:var(--ok)}
[hidden]{display:none!important}
.cards{display:flex;flex-wrap:wrap;gap:.8rem;margin:.8rem 0}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.6rem 1rem;min-width:9rem}
.card .n{font-size:1.7rem;font-weight:600}.card .l{color:var(--muted);font-size:.85rem}
table{border-collapse:collapse}td,th{border:1px solid var(--line);padding:.2rem .5rem;text-align:left;
vertical-align:top}th{background:var(--card)}
.settings{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,300px),1fr));gap:.15rem 1.5rem;
margin:.6rem 0}.settings div{display:flex;gap:.6rem;border-bottom:1px dotted var(--line)}
.settings dt{color:var(--muted);min-width:9rem}.settings dd{margin:0;overflow-wrap:anywhere}
table.compare td:first-child{color:var(--muted)}table.compare tr.differs td{font-weight:600}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,520px),1fr));gap:1rem;align-items:start}
.pair{display:grid;grid-template-columns:1fr 1fr;gap:1rem;margin-bottom:1rem;align-items:start}
figure.chart{margin:0;background:var(--card);border:1px solid var(--line);border-radius:8px;padding:.6rem}
figure.chart figcaption{font-weight:600;margin-bottom:.3rem}
figure.chart svg{width:100%;height:auto;display:block}
table.two td.num{text-align:right;font-variant-numeric:tabular-nums}
.filters{display:flex;flex-wrap:wrap;gap:.6rem 1rem;align-items:end;position:sticky;top:0;z-index:1;
background:var(--bg);padding:.6rem 0;border-bottom:1px solid var(--line)}
.filters label{display:flex;flex-direction:column;font-size:.8rem;color:var(--muted)}
.filters .grow{flex:1;min-width:12rem}.filters input,.filters select{font:inherit;padding:.2rem}
.ep-head,details.ep>summary{display:grid;grid-template-columns:4rem 1.5rem 7rem 11rem 8rem 1fr;gap:.5rem;
padding:.25rem .4rem;align-items:baseline}
details.ep.flip>summary{grid-template-columns:4rem 2.5rem 2.5rem 11rem 14rem 1fr}
.ep-head{font-weight:600;color:var(--muted);border-bottom:1px solid var(--line)}
details.ep{border-bottom:1px solid var(--line)}details.ep>summary{cursor:pointer;list-style:none}
details.ep>summary::-webkit-details-marker{display:none}
details.ep>summary:hover,details.ep[open]>summary{background:var(--card)}
details.ep>summary span{overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
details.ep>summary .q{white-space:normal}
.v.correct{color:var(--ok)}.v.wrong{color:var(--bad)}.v.gold-error{color:var(--muted)}
.ep-body{padding:.4rem .8rem 1rem 2rem}
.cols{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,380px),1fr));gap:1rem}
pre{background:var(--code);border:1px solid var(--line);border-radius:6px;padding:.5rem;margin:.2rem 0;
white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
table.rows{font-size:12px;margin:.2rem 0}.rows-note{color:var(--muted);font-size:.8rem;margin:.1rem 0}
table.rows tr.diff td{background:var(--mark)}
table.candidates{font-size:12px;margin:.2rem 0}table.candidates td.num{text-align:right}
table.candidates tr.chosen td{font-weight:600}table.candidates pre{margin:0}
.choice ol{font-size:12px;margin:.2rem 0 .4rem 1.2rem;padding:0}.choice li.right{font-weight:600}
.null{color:var(--muted);font-style:italic}
details.sample{border:1px solid var(--line);border-radius:6px;margin:.5rem 0;padding:.2rem .6rem}
details.sample>summary{cursor:pointer;color:var(--muted)}
ol.trace{padding-left:1.2rem}li.round{margin:.6rem 0}
.round-head{font-weight:600;font-size:.85rem}
.call{margin:.3rem 0 .3rem 1rem}.call-head{font:12px ui-monospace,monospace;color:var(--muted)}
.call.err .call-head{color:var(--bad)}.note{color:var(--bad);margin:.2rem 0 .2rem 1rem}
@media (max-width:800px){.pair{grid-template-columns:1fr}
.ep-head,details.ep>summary{grid-template-columns:3rem 1.2rem 1fr}
.ep-head span:nth-child(n+3):not(:last-child),details.ep>summary span:nth-child(n+3):not(.q){display:none}}
"""

# Filtering only; the page reads fine without it (the form stays hidden).
SCRIPT = """
(function () {
  var form = document.getElementById("filters");
  if (!form) { return; }
  form.hidden = false;
  var entries = Array.prototype.slice.call(document.querySelectorAll("details.ep"));
  var texts = entries.map(function (e) {
    var parts = [e.querySelector("summary").textContent];
    e.querySelectorAll("pre.sql").forEach(function (p) { parts.push(p.textContent); });
    return parts.join(" ").toLowerCase();
  });
  var shown = document.getElementById("shown");
  function value(name) { var f = form.elements[name]; return f ? f.value : ""; }
  function apply() {
    var verdict = value("verdict"), group = value("group"), db = value("db"), status = value("status");
    var agreement = value("agreement");
    var text = value("text").trim().toLowerCase();
    var n = 0;
    entries.forEach(function (e, i) {
      var d = e.dataset;
      var keep = (!verdict || d.verdict === verdict) && (!db || d.db === db) &&
        (!status || d.status === status) && (!group || d.group.split("\\n").indexOf(group) >= 0) &&
        (!agreement || d.agreement === agreement) &&
        (!text || texts[i].indexOf(text) >= 0);
      e.hidden = !keep;
      if (keep) { n += 1; }
    });
    shown.textContent = String(n);
  }
  form.addEventListener("input", apply);
  form.addEventListener("change", apply);
  form.addEventListener("submit", function (ev) { ev.preventDefault(); });
  apply();
})();
"""


def _script_hash(script: str) -> str:
    digest = hashlib.sha256(script.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


CSP = (
    f"default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src '{_script_hash(SCRIPT)}'; base-uri 'none'; form-action 'none'"
)


def document(title: str, body: str) -> str:
    """A whole HTML page: `title` is escaped here, `body` must already be safe HTML."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n"
        f"<body>{body}\n<script>{SCRIPT}</script></body></html>\n"
    )
