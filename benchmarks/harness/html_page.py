"""The page template of the HTML report (`html_report`): its style, its layout and the few lines of
script that build the per-question table from the JSON data block (filters by category, outcome and
text, kept in the address; `per_page` questions a page). A `str.format` template: its literal braces
are doubled."""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }}
h1 {{ font-size: 1.4em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; }}
.summaries {{ display: flex; flex-wrap: wrap; gap: 1.2em; }}
.summary table, #questions {{ border-collapse: collapse; }}
.summary th, .summary td {{ text-align: left; padding: 2px 8px; border-bottom: 1px solid #eee;
  font-size: 13px; }}
.path {{ font-size: 11px; color: #777; }}
.plots {{ display: flex; flex-wrap: wrap; gap: 1em; }} figure {{ margin: 0; }}
figcaption {{ font-size: 12px; color: #555; }}
#controls {{ margin: .6em 0; display: flex; gap: 1em; flex-wrap: wrap; align-items: center; }}
#questions th, #questions td {{ border: 1px solid #ddd; padding: 4px 6px; vertical-align: top;
  font-size: 12.5px; }}
#questions td.q {{ max-width: 22em; }}
.ok {{ color: #186a1e; font-weight: 600; }} .bad {{ color: #b3261e; font-weight: 600; }}
.fail {{ color: #8a5300; font-weight: 600; }}
.gold {{ background: #fff3b0; }} .ids {{ font-family: monospace; font-size: 11px; }}
details pre {{ white-space: pre-wrap; max-height: 18em; overflow: auto; font-size: 11px; }}
</style></head>
<body>
<h1>{title}</h1>
<h2>Summary</h2><div class="summaries">{summaries}</div>
<h2>Plots</h2><div class="plots">{plots}</div>
<h2>Per question</h2>
<div id="controls">
<label>category <select id="category"><option value="">all</option></select></label>
<label>outcome <select id="outcome">
<option value="">all</option><option value="all-correct">correct in every system</option>
<option value="all-wrong">wrong in every system</option><option value="disagree">systems disagree</option>
<option value="any-wrong">wrong in some system</option><option value="failed">failed in some system</option>
</select></label>
<label>text <input id="text" type="search" placeholder="question or answer"></label>
<span id="count"></span>
<button id="prev">previous</button><span id="page"></span><button id="next">next</button>
</div>
<table id="questions"><thead></thead><tbody></tbody></table>
<script type="application/json" id="data">{data}</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const PER_PAGE = {per_page};
let page = 0;
const $ = (id) => document.getElementById(id);
const ESCAPES = {{"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}};
function esc(s) {{ return String(s ?? "").replace(/[&<>"]/g, (c) => ESCAPES[c]); }}
function outcome(q) {{
  const rows = q.systems.filter((r) => r);
  const failed = rows.some((r) => r.error);
  const verdicts = rows.map((r) => r.verdict);
  return {{failed, allCorrect: verdicts.length > 0 && verdicts.every((v) => v === true),
           allWrong: verdicts.length > 0 && verdicts.every((v) => v === false),
           anyWrong: verdicts.some((v) => v === false),
           disagree: new Set(verdicts.map(String)).size > 1}};
}}
function keep(q) {{
  const cat = $("category").value, out = $("outcome").value, text = $("text").value.toLowerCase();
  if (cat && q.category !== cat) return false;
  if (text && !(q.question + " " + q.answer).toLowerCase().includes(text)) return false;
  if (!out) return true;
  const o = outcome(q);
  return {{"all-correct": o.allCorrect, "all-wrong": o.allWrong, "disagree": o.disagree,
           "any-wrong": o.anyWrong, "failed": o.failed}}[out];
}}
function verdictCell(r) {{
  if (!r) return '<span class="fail">no record</span>';
  if (r.error) return '<span class="fail">failed</span> ' + esc(r.error);
  const v = r.verdict === true ? '<span class="ok">correct</span>'
          : r.verdict === false ? '<span class="bad">wrong</span>' : '<span>not judged</span>';
  const units = (r.retrieved || []).map((u) =>
      '<div class="ids' + (u.gold ? ' gold' : '') + '">' + (u.gold ? '&#9733; ' : '')
      + esc(u.time || "") + " "
      + esc((u.turns.length ? u.turns : u.sessions).join(", ")) + "</div>").join("");
  return v + "<div>" + esc(r.response) + "</div>"
      + "<details><summary>retrieved (" + (r.retrieved || []).length + ", gold &#9733;)</summary>" + units
      + (r.context ? "<pre>" + esc(r.context) + "</pre>" : "") + "</details>";
}}
function draw() {{
  const rows = DATA.questions.filter(keep);
  const pages = Math.max(1, Math.ceil(rows.length / PER_PAGE));
  page = Math.min(page, pages - 1);
  $("count").textContent = rows.length + " of " + DATA.questions.length + " questions";
  $("page").textContent = " page " + (page + 1) + " / " + pages + " ";
  $("questions").tBodies[0].innerHTML = rows.slice(page * PER_PAGE, (page + 1) * PER_PAGE).map((q) =>
      "<tr><td class='q'><b>" + esc(q.id) + "</b> <i>" + esc(q.category) + "</i><div>" + esc(q.question)
      + "</div><div>gold: <b>" + esc(q.answer) + "</b></div><div class='ids'>evidence: "
      + esc(q.evidence.join(", ")) + "</div></td>"
      + q.systems.map((r) => "<td>" + verdictCell(r) + "</td>").join("") + "</tr>").join("");
}}
$("questions").tHead.innerHTML = "<tr><th>question, gold answer and evidence</th>"
    + DATA.systems.map((s) => "<th>" + esc(s) + "</th>").join("") + "</tr>";
for (const c of [...new Set(DATA.questions.map((q) => q.category))].sort()) {{
  const o = document.createElement("option"); o.value = c; o.textContent = c; $("category").appendChild(o);
}}
// the filters travel in the address (#category=...&outcome=...&text=...), so a view can be shared
const FILTERS = ["category", "outcome", "text"];
for (const [key, value] of new URLSearchParams(location.hash.slice(1))) {{
  if (FILTERS.includes(key)) $(key).value = value;
}}
function remember() {{
  const kept = new URLSearchParams();
  for (const id of FILTERS) if ($(id).value) kept.set(id, $(id).value);
  history.replaceState(null, "", kept.toString() ? "#" + kept.toString() : location.pathname);
}}
for (const id of FILTERS) $(id).addEventListener("input", () => {{ page = 0; remember(); draw(); }});
$("prev").addEventListener("click", () => {{ page = Math.max(0, page - 1); draw(); }});
$("next").addEventListener("click", () => {{ page += 1; draw(); }});
draw();
</script>
</body></html>
"""
