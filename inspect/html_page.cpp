// The page write_html() fills in (inspect/html.cpp): @TITLE@, @SVG@ (the
// graph, laid out by dot) and @DATA@ (the recorded pass, as JSON). Plain
// HTML, CSS and a short script, nothing fetched: it opens from disk.
//
// The data: tensors[K] is box tK of the graph (label, shape, value,
// requires_grad, and for an op's output: op, index, inputs, its local `rule`,
// its `group` when a call recorded it with others, and for a lookup the `ids`
// it read and the `rows_hit`). steps[S - 1] is
// step S: the op's output tensor t, and per input slot its `share` (null:
// needs no gradient), the input's running `total` after the step (left out
// when it is the share), the input's `rule` and the rule `worked` out with the
// step's numbers (lines of text, computed by inspect/rules.cpp). The gradient arriving at the output is the total
// sent to it so far (or `arriving`, where the engine's differs). `seed` is
// what backward() starts the loss with, `final` what it gave each leaf. A
// value is {shape, n, short, v: [every value as text]} or, for more than 64
// values, {shape, n, short, min, max, mean}; SparseRows add rows (the first
// 64), nrows and cols. `short` is the line a box in the graph shows.
namespace tg::debug {

extern const char html_page[];
const char html_page[] = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>backward of @TITLE@</title>
<script>
// Before anything else: an error in the page's script shows on the page.
window.addEventListener('error', e => {
  const p = document.createElement('pre');
  p.className = 'page-error';
  p.textContent = 'This page has a bug: ' + e.message + ' (line ' + e.lineno + ')';
  (document.body || document.documentElement).prepend(p);
});
</script>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #222; background: #fafafa; }
header { position: sticky; top: 0; z-index: 2; background: #fff; border-bottom: 1px solid #ddd;
         padding: 8px 16px; display: flex; flex-wrap: wrap; gap: 6px 24px; align-items: center; }
h1 { font-size: 18px; margin: 0; }
h2 { font-size: 16px; margin: 0 0 6px; }
h3 { font-size: 14px; margin: 12px 0 4px; }
code, .vals, #graph text { font-family: ui-monospace, monospace; }
nav button { font-size: 15px; min-width: 34px; }
nav input { width: 180px; vertical-align: middle; }
#counter { font-variant-numeric: tabular-nums; margin-left: 6px; }
.hint { color: #666; font-size: 12px; }
main { display: grid; grid-template-columns: minmax(0, 1fr) minmax(360px, 36%); gap: 12px;
       padding: 12px 16px; }
#graph-box, #step, #tensors { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 10px; }
#graph { overflow: auto; max-height: calc(100vh - 150px); cursor: grab; }
/* dot measures text with its own font metrics: a line a little wider in the
   browser's monospace font must not be cut off at the picture's edge */
#graph svg { display: block; margin: 0 auto; overflow: visible; padding: 0 12px; }
#zoom-bar { float: right; font-size: 12px; display: flex; gap: 4px; align-items: center; }
#zoom-bar button { font-size: 12px; min-width: 28px; }
#graph.dragging { cursor: grabbing; }
.rule { font-family: ui-monospace, monospace; background: #f3e5f5; border-left: 3px solid #7b1fa2;
        padding: 3px 6px; margin: 4px 0; white-space: pre-wrap; }
.worked { margin: 2px 0 4px; padding-left: 18px; font-family: ui-monospace, monospace; font-size: 13px; }
.worked li { white-space: pre-wrap; }
#ids { font-family: ui-monospace, monospace; background: #e8f5e9; padding: 3px 6px; }
.group-note { color: #7b1fa2; font-size: 12px; }
#graph .node { cursor: pointer; }
#graph .node.done > :is(polygon, path, ellipse) { fill: #eeeeee; }
#graph .node.done text { fill: #777; }
#graph .node.has-grad > :is(polygon, path, ellipse) { stroke: #2e7d32; }
#graph .node.receiving > :is(polygon, path, ellipse) { fill: #ffe0b2; stroke: #ef6c00; stroke-width: 2.5; }
#graph .node.active > :is(polygon, path, ellipse) { fill: #fff176; stroke: #f9a825; stroke-width: 3; }
#graph .node.active text, #graph .node.receiving text { fill: #000; }
#graph .node.selected > :is(polygon, path, ellipse) { stroke: #1565c0; stroke-width: 3;
                                                      stroke-dasharray: 4 2; }
#graph .edge.flow path { stroke: #ef6c00; stroke-width: 2.5; }
#graph .edge.flow polygon { fill: #ef6c00; stroke: #ef6c00; }
#graph text.grad-line { fill: #2e7d32; }
.legend { font-size: 12px; color: #555; margin: 6px 0 0; }
.legend b { padding: 0 4px; border-radius: 3px; font-weight: normal; }
table { border-collapse: collapse; }
#final, #tensors > table { table-layout: fixed; width: 100%; }
.share { border-top: 1px solid #eee; padding: 4px 0; }
.share th { color: #666; font-weight: normal; text-align: right; padding-right: 8px; vertical-align: top; }
.vals { overflow-x: auto; }
#final > tbody > tr > *, #tensors > table > tbody > tr > * {
  border-top: 1px solid #eee; padding: 4px 6px; vertical-align: top; text-align: left; }
th { font-weight: 600; }
.vals table td, .vals table th { padding: 0 4px; text-align: right; font-size: 12px; }
.vals table th { color: #999; font-weight: normal; font-size: 11px; }
.vals td.v { background: #f4f8ff; }
.note, .summary, .none, .muted { color: #666; font-size: 12px; }
.sparse-note { color: #6a1b9a; font-size: 12px; }
tr.picked { background: #e3f2fd; }
.history { margin: 0; padding-left: 16px; }
.page-error { background: #fdd; color: #900; padding: 8px; margin: 0; }
</style>
</head>
<body>
<header>
  <h1>Backward pass of <code>@TITLE@</code></h1>
  <nav>
    <button id="first" title="first step (Home)">|&#x25C0;</button>
    <button id="prev" title="previous step (left arrow)">&#x25C0;</button>
    <input id="slider" type="range" min="0" value="0" aria-label="step">
    <button id="next" title="next step (right arrow)">&#x25B6;</button>
    <button id="last" title="last step (End)">&#x25B6;|</button>
    <span id="counter"></span>
  </nav>
  <span class="hint">&larr; &rarr; keys step; the address ends in #step=K: a link to this step</span>
</header>
<main>
  <section id="graph-box">
    <span id="zoom-bar"><button id="zoom-out" title="smaller (or ctrl + wheel)">&minus;</button>
      <span id="zoom-level"></span><button id="zoom-in" title="larger (or ctrl + wheel)">+</button>
      <button id="zoom-fit" title="fit the graph to the box">fit</button></span>
    <div id="graph" class="fit">@SVG@</div>
    <p class="legend">Leaves at the bottom, the loss at the top; backward walks down.
      <b style="background:#fff176">yellow</b> the op running at this step,
      <b style="background:#ffe0b2">orange</b> the tensors it adds to,
      <b style="background:#dde8ff">blue</b> leaves that take a gradient,
      <b style="background:#eee">grey</b> ops already run. Each box's last line is the gradient it has
      received so far. A dashed frame holds the ops of one call that recorded several (cross_entropy:
      log_softmax and nll_loss). Drag to move the graph. Click a box for its row below.</p>
  </section>
  <section id="step"></section>
</main>
<section id="tensors" style="margin: 0 16px 16px">
  <h2>Every tensor at this step</h2>
  <table>
    <colgroup><col style="width: 16%"><col style="width: 28%"><col style="width: 28%"><col style="width: 28%">
    </colgroup>
    <thead><tr><th>tensor</th><th>value</th><th>gradient so far</th><th>where it came from</th></tr></thead>
    <tbody id="tensor-rows"></tbody>
  </table>
</section>
<script type="application/json" id="data">@DATA@</script>
<script>
'use strict';
const data = JSON.parse(document.getElementById('data').textContent);
const tensors = data.tensors, steps = data.steps, last = steps.length;
const $ = id => document.getElementById(id);

// el('td', {class: 'v'}, 'text', child, ...): a new element.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  e.append(...children);
  return e;
}

const shapeStr = shape => '[' + shape.join(', ') + ']';
const opCall = t => tensors[t].op + '(' + tensors[t].inputs.map(i => tensors[i].label).join(', ') +
                    ') -> ' + shapeStr(tensors[t].shape);

// The indices of flat position k in `shape`, as "i, j".
function indexStr(k, shape) {
  const idx = [];
  for (let d = shape.length - 1; d >= 0; --d) {
    idx.unshift(k % shape[d]);
    k = Math.floor(k / shape[d]);
  }
  return idx.join(', ');
}

// "rows {1, 2, 3} of 6: 9 values written; a dense gradient would write 18 (6 x 3)"
function sparseNote(v) {
  const rows = v.rows.join(', ') + (v.nrows > v.rows.length ? ', ...' : '');
  const all = v.shape[0] * v.cols;
  return 'sparse: rows {' + rows + '} of ' + v.shape[0] + ': ' + v.n + ' values (' + v.nrows + ' x ' +
         v.cols + '); a dense gradient would write all ' + all + ' (' + v.shape[0] + ' x ' + v.cols + ')';
}

// A value (see the data's description) as a small table, one cell per number,
// each titled with its index: name[i, j] = x.
function vals(v, name) {
  if (!v) return el('span', {class: 'none'}, '\u2014');
  const box = el('div', {class: 'vals'});
  if (v.rows) box.append(el('div', {class: 'sparse-note'}, sparseNote(v)));
  if (!v.v) {
    box.append(el('div', {class: 'summary'}, v.n + ' values ' + shapeStr(v.shape) + ': min ' + v.min +
                  ', max ' + v.max + ', mean ' + v.mean));
    return box;
  }
  if (v.n === 0) {
    box.append(el('span', {class: 'none'}, '(no values)'));
    return box;
  }
  // Rows of the table: the last dim across; SparseRows: one per listed row.
  // A long 1-d tensor wraps every 5 values: row "10", column "+3" is [13].
  const shape = v.rows ? [v.rows.length, v.cols] : v.shape;
  const wrap = shape.length === 1 && v.n > 5;
  const cols = wrap ? 5 : shape.length ? shape[shape.length - 1] : 1;
  const table = el('table');
  if (shape.length > 0 && v.n > 1) {
    const head = el('tr', {}, el('th'));
    for (let j = 0; j < cols; ++j) head.append(el('th', {}, (wrap ? '+' : '') + j));
    table.append(head);
  }
  for (let r = 0; r * cols < v.n; ++r) {
    const rowIndex = v.rows ? String(v.rows[r]) : wrap ? String(r * cols)
                   : shape.length > 1 ? indexStr(r, shape.slice(0, -1)) : '';
    const tr = el('tr', {}, el('th', {}, rowIndex));
    for (let j = 0; j < cols && r * cols + j < v.n; ++j) {
      const k = r * cols + j;
      const at = v.rows ? '[' + v.rows[r] + ', ' + j + ']'
               : shape.length ? '[' + indexStr(k, shape) + ']' : '';
      tr.append(el('td', {class: 'v', title: name + at + ' = ' + v.v[k]}, v.v[k]));
    }
    table.append(tr);
  }
  box.append(table);
  return box;
}

// What the first k steps did: each tensor's running total, and every share it got.
function replay(k) {
  const total = tensors.map(() => null), got = tensors.map(() => []);
  total[0] = data.seed;
  got[0].push({step: 0});
  for (let s = 1; s <= k; ++s) {
    const st = steps[s - 1];
    st.inputs.forEach((input, slot) => {
      if (!input.share) return;
      total[input.t] = input.total || input.share;
      got[input.t].push({step: s, op: st.t, slot: slot, share: input.share});
    });
  }
  return {total, got};
}

// ------------------------------------------------------------------ the graph

// Tensor K's boxes: tK, and for a leaf used by several ops tK_2, tK_3, ...
const boxes = tensors.map((t, k) => {
  const all = [];
  for (let g = $('t' + k), use = 2; g; g = $('t' + k + '_' + use++)) all.push(g);
  return all;
});
const gradLines = boxes.map(all => all.map(g => {
  const line = [...g.querySelectorAll('text')].find(x => x.textContent.startsWith('grad '));
  if (line) line.classList.add('grad-line');
  return line;
}).filter(line => line));
let picked = null;

function drawGraph(k, state) {
  const active = k > 0 ? steps[k - 1].t : null;
  const ranBefore = new Set(steps.slice(0, Math.max(0, k - 1)).map(s => s.t));
  const receiving = new Set(k > 0 ? steps[k - 1].inputs.filter(i => i.share).map(i => i.t) : [0]);
  boxes.forEach((all, t) => {
    for (const g of all) {
      g.classList.toggle('active', t === active);
      g.classList.toggle('done', ranBefore.has(t));
      g.classList.toggle('receiving', receiving.has(t));
      g.classList.toggle('has-grad', state.total[t] !== null);
      g.classList.toggle('selected', t === picked);
    }
    const grad = 'grad ' + (state.total[t] ? state.total[t].short : '-');
    for (const line of gradLines[t]) line.textContent = grad;
  });
  for (const e of document.querySelectorAll('#graph .edge')) e.classList.remove('flow');
  if (active !== null)
    steps[k - 1].inputs.forEach((input, slot) => {
      const edge = $('e' + active + '_' + slot);
      if (edge && input.share) edge.classList.add('flow');
    });
  const focus = boxes[active !== null ? active : 0][0];
  if (focus) focus.scrollIntoView({block: 'nearest', inline: 'nearest'});
}

// ------------------------------------------------------------- the step panel

function describeInput(t) {
  const x = tensors[t];
  if (x.op) return x.label + '\'s output ' + shapeStr(x.shape);
  return x.label + ' ' + shapeStr(x.shape) + (x.requires_grad ? ' (leaf)' : '');
}

function drawStep(k, state) {
  const box = $('step');
  box.replaceChildren();
  if (k === 0) {
    box.append(el('h2', {id: 'step-title'}, 'Step 0 of ' + last + ': the seed'),
               el('p', {}, 'backward() starts at the loss, ', el('code', {}, tensors[0].label),
                  ', with d loss / d loss = 1. Each step after this runs one tape entry, the latest first.'),
               el('h3', {}, 'Gradient at the loss'), el('div', {id: 'arriving'}, vals(data.seed, 'loss')));
  } else {
    const st = steps[k - 1], op = tensors[st.t];
    box.append(el('h2', {id: 'step-title'}, 'Step ' + k + ' of ' + last + ': ',
                  el('code', {id: 'step-op'}, op.label)),
               el('p', {}, 'runs the backward of ', el('code', {}, opCall(st.t))));
    if (op.group)
      box.append(el('p', {class: 'group-note', id: 'group'}, 'part of ', el('code', {}, op.group),
                    ', the call that was written; it recorded this op and the others in its dashed frame'));
    if (op.rule)
      box.append(el('h3', {}, 'The local rule (chain rule: what this op passes on, given the gradient at its output)'),
                 el('div', {class: 'rule', id: 'rule'}, op.rule));
    if (op.ids)
      box.append(el('p', {id: 'ids'}, (op.op === 'nll_loss' ? 'target classes: ' : 'ids looked up: ') +
                    '[' + op.ids.join(', ') + (op.nids > op.ids.length ? ', ...' : '') + '] \u2192 ' +
                    (op.op === 'nll_loss' ? 'classes' : 'rows') + ' hit {' + op.rows_hit.join(', ') +
                    (op.nrows_hit > op.rows_hit.length ? ', ...' : '') + '}'));
    box.append(
               el('h3', {}, 'Gradient arriving at its output (d loss / d output)'),
               el('div', {id: 'arriving'}, vals(st.arriving || state.total[st.t], op.label)),
               el('h3', {}, 'What it adds to each input (+=), and the input\'s total after this step'));
    // One block per input: what it is, then the share it gets and its total after this step.
    const list = el('div', {id: 'shares'});
    st.inputs.forEach((input, slot) => {
      const name = tensors[input.t].label;
      const first = st.inputs.findIndex(i => i.t === input.t);
      const block = el('div', {class: 'share', 'data-input': slot},
                       el('div', {class: 'input-name'}, 'input ' + slot + ': ',
                          el('code', {}, describeInput(input.t))));
      if (!input.share) {
        block.append(el('div', {class: 'muted'}, 'needs no gradient'));
      } else {
        if (first !== slot)
          block.append(el('div', {class: 'note'}, 'the same tensor as input ' + first +
                          ': both shares add up in its total'));
        if (input.rule) {
          block.append(el('div', {class: 'rule input-rule'}, input.rule));
          if (input.worked && input.worked.length)
            block.append(el('ul', {class: 'worked'}, ...input.worked.map(w => el('li', {}, w))));
        }
        block.append(el('table', {}, el('tbody', {},
            el('tr', {}, el('th', {}, '+='), el('td', {class: 'share-value'}, vals(input.share, name))),
            el('tr', {}, el('th', {}, 'total'),
               el('td', {class: 'total-value'}, vals(input.total || input.share, name))))));
      }
      list.append(block);
    });
    box.append(list);
  }
  if (k === last) {
    box.append(el('h3', {}, 'Done: what backward() leaves in each leaf\'s .grad'),
               el('p', {class: 'note'}, 'loss.backward() adds these to the leaves\' gradients; each is the ' +
                  'sum of the shares listed for it below.'));
    const body = el('tbody');
    for (const [t, grad] of Object.entries(data.final))
      body.append(el('tr', {class: 'leaf', 'data-name': tensors[t].label},
                     el('td', {}, el('code', {}, tensors[t].label + ' ' + shapeStr(tensors[t].shape))),
                     el('td', {class: 'final-value'}, vals(grad, tensors[t].label))));
    const columns = el('colgroup', {}, el('col', {style: 'width: 30%'}), el('col'));
    box.append(el('table', {id: 'final'}, columns, body));
  }
}

// ------------------------------------------------------------ the tensor list

// The backward order: ops latest first, then the leaves that take a gradient, then the rest.
const order = tensors.map((t, k) => k).sort((a, b) => {
  const rank = t => tensors[t].op ? 0 : tensors[t].requires_grad ? 1 : 2;
  return rank(a) - rank(b) || (tensors[b].index || 0) - (tensors[a].index || 0) || a - b;
});

function drawTensors(k, state) {
  const body = $('tensor-rows');
  body.replaceChildren();
  for (const t of order) {
    const x = tensors[t];
    const history = el('ul', {class: 'history'});
    for (const g of state.got[t]) {
      if (g.step === 0) {
        history.append(el('li', {}, el('a', {href: '#step=0'}, 'step 0'), ': the seed, 1'));
        continue;
      }
      history.append(el('li', {}, el('a', {href: '#step=' + g.step}, 'step ' + g.step), ': from ',
                        el('code', {}, tensors[g.op].label), ' (its input ' + g.slot + ') +=',
                        vals(g.share, x.label)));
    }
    if (!x.requires_grad) history.append(el('li', {class: 'muted'}, 'needs no gradient'));
    const what = x.op ? 'output of ' + opCall(t) : x.requires_grad ? 'leaf' : 'leaf, needs no gradient';
    body.append(el('tr', {id: 'row-' + t, class: t === picked ? 'picked' : ''},
                   el('td', {}, el('code', {}, x.label),
                      el('div', {class: 'note'}, shapeStr(x.shape) + ', ' + what)),
                   el('td', {}, vals(x.value, x.label)),
                   el('td', {class: 'grad-now'}, vals(state.total[t], x.label)),
                   el('td', {}, history)));
  }
}

// ---------------------------------------------------------------- stepping

let current = -1;

function show(k) {
  k = Math.max(0, Math.min(last, k));
  current = k;
  const state = replay(k);
  drawGraph(k, state);
  drawStep(k, state);
  drawTensors(k, state);
  $('counter').textContent = 'step ' + k + ' of ' + last;
  $('slider').value = k;
  $('first').disabled = $('prev').disabled = k === 0;
  $('last').disabled = $('next').disabled = k === last;
  if (location.hash !== '#step=' + k) history.replaceState(null, '', '#step=' + k);
  if (svg && scale === null) drawScale();  // the step panel's text may have changed the graph's room
}

function stepFromHash() {
  const m = /^#step=(\d+)$/.exec(location.hash);
  return m ? Number(m[1]) : 0;
}

$('slider').max = last;
$('slider').addEventListener('input', () => show(Number($('slider').value)));
$('first').addEventListener('click', () => show(0));
$('prev').addEventListener('click', () => show(current - 1));
$('next').addEventListener('click', () => show(current + 1));
$('last').addEventListener('click', () => show(last));
document.addEventListener('keydown', e => {
  if (e.altKey || e.ctrlKey || e.metaKey || e.target.tagName === 'INPUT') return;
  const to = {ArrowLeft: current - 1, ArrowRight: current + 1, Home: 0, End: last}[e.key];
  if (to === undefined) return;
  e.preventDefault();
  show(to);
});
window.addEventListener('hashchange', () => show(stepFromHash()));
// The graph's scale: "fit" makes it fit the box, but never below 0.75 (text
// under about 10 px); beyond that the box scrolls, and dragging moves it.
// The buttons and ctrl + wheel zoom.
const svg = document.querySelector('#graph svg');
const natural = svg && {width: svg.width.baseVal.value, height: svg.height.baseVal.value};
let scale = null;  // null: fit
function fitScale() {
  const room = {width: $('graph').clientWidth - 32, height: window.innerHeight - 170};  // 24 px of padding
  return Math.max(0.75, Math.min(1.25, room.width / natural.width, room.height / natural.height));
}
function drawScale() {
  if (!svg) return;
  const s = scale === null ? fitScale() : scale;
  svg.style.width = natural.width * s + 'px';
  svg.style.height = natural.height * s + 'px';
  $('zoom-level').textContent = Math.round(s * 100) + '%';
}
function zoom(factor) {
  scale = Math.max(0.25, Math.min(3, (scale === null ? fitScale() : scale) * factor));
  drawScale();
}
$('zoom-in').addEventListener('click', () => zoom(1.25));
$('zoom-out').addEventListener('click', () => zoom(0.8));
$('zoom-fit').addEventListener('click', () => { scale = null; drawScale(); });
$('graph').addEventListener('wheel', e => {
  if (!e.ctrlKey) return;
  e.preventDefault();
  zoom(e.deltaY < 0 ? 1.1 : 0.9);
}, {passive: false});
let drag = null;
$('graph').addEventListener('mousedown', e => {
  if (e.button !== 0) return;
  drag = {x: e.clientX, y: e.clientY, left: $('graph').scrollLeft, top: $('graph').scrollTop, moved: false};
});
window.addEventListener('mousemove', e => {
  if (!drag) return;
  const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
  if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
  if (!drag.moved) return;
  $('graph').classList.add('dragging');
  $('graph').scrollLeft = drag.left - dx;
  $('graph').scrollTop = drag.top - dy;
});
window.addEventListener('mouseup', () => {
  $('graph').classList.remove('dragging');
  setTimeout(() => { drag = null; }, 0);  // a drag's release is not a click on a box
});
window.addEventListener('resize', drawScale);
drawScale();
boxes.forEach((all, t) => all.forEach(g => g.addEventListener('click', () => {
  if (drag && drag.moved) return;
  picked = t;
  show(current);
  $('row-' + t).scrollIntoView({block: 'center'});
})));
show(stepFromHash());
</script>
</body>
</html>
)page";

}  // namespace tg::debug
