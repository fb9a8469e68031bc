"use strict";
// The attention page of attn serve: a sentence, its translation and one attention map
// (POST /v1/attention), with the map's cells in the DOM (td.cell with data-row, data-col and
// data-weight). The view is named by the URL: /?text=...&kind=cross&layer=0&head=mean.
// A language model's page: a prompt, its continuation streamed as it is sampled
// (POST /v1/generate) and the prompt's causal self-attention. A classifier's page: a text, its
// class and which tokens its pooling reads (one row), or its encoder's self-attention.

const $ = (id) => document.getElementById(id);
let model = null;
let continued = null; // the prompt whose continuation is shown (a language model)

const isLanguageModel = () => model.architecture === "transformer_lm";
const isClassifier = () => model.architecture === "transformer_classifier" ||
                           model.architecture === "rnn_classifier";
// An rnn classifier's only attention is its pooling: its encoder is recurrent.
const isRnnClassifier = () => model.architecture === "rnn_classifier";

// Blues: white at weight 0 to dark blue at 1.
function colour(weight) {
  const w = Math.max(0, Math.min(1, weight));
  const mix = (from, to) => Math.round(from + (to - from) * w);
  return `rgb(${mix(247, 8)}, ${mix(251, 48)}, ${mix(255, 107)})`;
}

function layersOf(kind) {
  const c = model.config;
  if (kind === "pooling") return 1;
  if (isClassifier()) return c.encoder_layers;
  if (c.arch !== "transformer" && !isLanguageModel()) return 1;
  return kind === "encoder" ? c.encoder_layers : c.decoder_layers;
}

function headsOf() {
  const multiHead = model.config.arch === "transformer" || isLanguageModel() || isClassifier();
  return multiHead ? model.config.num_heads : 1;
}

function setOptions(select, values, chosen) {
  select.replaceChildren(...values.map(([value, label]) => new Option(label, value)));
  select.value = values.some(([value]) => value === chosen) ? chosen : values[values.length - 1][0];
}

function fillChoices(layer, head) {
  const kind = $("kind").value;
  const layers = Array.from({ length: layersOf(kind) }, (_, i) => [String(i), String(i)]);
  setOptions($("layer"), layers, layer);
  const heads = [["mean", "mean of heads"]].concat(
    Array.from({ length: headsOf() }, (_, i) => [String(i), String(i)]));
  setOptions($("head"), heads, head === undefined ? "mean" : head);
  if (head === undefined) $("head").value = "mean";
  // The pooling is one row over the text: no layer or head to choose.
  $("layer").disabled = $("head").disabled = kind === "pooling";
}

function showError(message) {
  $("error").textContent = message;
  $("error").hidden = false;
  document.body.dataset.state = "error";
}

function focusRow(answer, row) {
  document.querySelectorAll("#heatmap tr.active").forEach((tr) => tr.classList.remove("active"));
  const tr = document.querySelector(`#heatmap tr[data-row="${row}"]`);
  if (tr) tr.classList.add("active");
  const strip = answer.columns.map((label, j) => {
    const span = document.createElement("span");
    const weight = answer.weights[row][j];
    span.textContent = label;
    span.title = weight.toFixed(3);
    span.style.background = colour(weight);
    span.style.color = weight > 0.5 ? "#fff" : "inherit";
    return span;
  });
  const head = document.createElement("strong");
  head.textContent = `${answer.rows[row]} → `;
  $("focus").replaceChildren(head, ...strip);
}

function render(answer) {
  if (isClassifier()) {
    $("translation").textContent = `${answer.label} (${answer.probability.toFixed(2)})`;
  } else if (!isLanguageModel()) {
    $("translation").textContent = answer.translation;
  }
  const table = $("heatmap");
  const thead = document.createElement("thead");
  const top = document.createElement("tr");
  top.appendChild(document.createElement("th"));
  for (const label of answer.columns) {
    const th = document.createElement("th");
    th.textContent = label;
    top.appendChild(th);
  }
  thead.appendChild(top);
  const tbody = document.createElement("tbody");
  answer.rows.forEach((label, i) => {
    const tr = document.createElement("tr");
    tr.dataset.row = String(i);
    const th = document.createElement("th");
    th.className = "row";
    th.textContent = label;
    tr.appendChild(th);
    answer.weights[i].forEach((weight, j) => {
      const td = document.createElement("td");
      td.className = "cell";
      td.dataset.row = String(i);
      td.dataset.col = String(j);
      td.dataset.weight = String(weight);
      td.title = `${label} → ${answer.columns[j]}: ${weight.toFixed(3)}`;
      td.style.background = colour(weight);
      tr.appendChild(td);
    });
    tr.addEventListener("mouseenter", () => focusRow(answer, i));
    tbody.appendChild(tr);
  });
  table.replaceChildren(thead, tbody);
  table.dataset.kind = answer.kind;
  table.dataset.layer = String(answer.layer);
  table.dataset.head = String(answer.head);
  $("result").hidden = false;
  if (answer.rows.length > 0) focusRow(answer, 0);
}

async function show() {
  const text = $("text").value;
  if (text.trim() === "") return;
  const request = { text, kind: $("kind").value, layer: Number($("layer").value) };
  if ($("head").value !== "mean") request.head = Number($("head").value);
  const query = new URLSearchParams({ text, kind: request.kind, layer: $("layer").value,
                                      head: $("head").value });
  history.replaceState(null, "", `/?${query}`);
  document.body.dataset.state = "loading";
  $("error").hidden = true;
  try {
    const reply = await fetch("/v1/attention", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(request) });
    const answer = await reply.json();
    if (!reply.ok) return showError(answer.error || `HTTP ${reply.status}`);
    render(answer);
    if (isLanguageModel() && continued !== text) {
      await continuePrompt(text);
      continued = text;
    }
    document.body.dataset.state = "ready";
  } catch (e) {
    showError(`the server did not answer: ${e}`);
  }
}

// Streams the continuation of a prompt into the page, one JSON line per token
// (docs/serving.md), then shows the final text, which the pieces join to.
async function continuePrompt(prompt) {
  $("translation").textContent = "";
  const reply = await fetch("/v1/generate", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt, max_new_tokens: Math.min(100, model.max_new_tokens),
                           stream: true }) });
  if (!reply.ok) {
    const answer = await reply.json();
    throw new Error(answer.error || `HTTP ${reply.status}`);
  }
  const reader = reply.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let end;
    while ((end = pending.indexOf("\n")) >= 0) {
      const line = JSON.parse(pending.slice(0, end));
      pending = pending.slice(end + 1);
      if (line.error) throw new Error(line.error);
      if (line.done) $("translation").textContent = line.results[0].text;
      else $("translation").textContent += line.text;
    }
  }
}

// A language model has one attention, its causal self-attention, and continues prompts.
function showAsLanguageModel() {
  const c = model.config;
  $("model-summary").textContent =
    `${model.architecture}, ${model.parameters.toLocaleString("en")} parameters, ` +
    `${model.target_tokenizer.kind} tokens, context ${model.context}, ${model.precision}, ` +
    `${c.decoder_layers} layers, ${c.num_heads} heads`;
  $("text-label").textContent = "Prompt";
  $("text").placeholder = "type the start of a text";
  $("go").textContent = "Generate";
  $("result-title").textContent = "Continuation";
  $("kind").value = "self";
  $("kind-choice").hidden = true;
  document.title = "attn: language model";
}

// A classifier labels a text; its views are the pooling and the encoder's self-attention.
function showAsClassifier() {
  const c = model.config;
  const classes = model.classes.length <= 6 ? model.classes.join(", ")
                                            : `${model.classes.slice(0, 6).join(", ")}, …`;
  const encoder = isRnnClassifier()
    ? `${c.layers} ${c.bidirectional ? "bidirectional " : ""}${c.cell} layers of ${c.hidden}`
    : `${c.encoder_layers} layers, ${c.num_heads} heads`;
  $("model-summary").textContent =
    `${model.architecture}, ${model.parameters.toLocaleString("en")} parameters, ` +
    `${model.source_tokenizer.kind} tokens, ${model.classes.length} classes (${classes}), ` +
    `${model.precision}, ${encoder}, ${c.pooling} pooling`;
  $("text-label").textContent = "Text";
  $("text").placeholder = "type a text to classify";
  $("go").textContent = "Classify";
  $("result-title").textContent = "Class";
  const kinds = [new Option("pooling (which tokens the class reads)", "pooling")];
  if (!isRnnClassifier()) {
    kinds.push(new Option("encoder self-attention (token → token)", "encoder"));
  }
  $("kind").replaceChildren(...kinds);
  $("kind").value = "pooling";
  document.title = "attn: classifier";
}

async function start() {
  try {
    model = await (await fetch("/v1/model")).json();
  } catch (e) {
    return showError(`the server did not answer: ${e}`);
  }
  const c = model.config;
  if (isLanguageModel()) showAsLanguageModel();
  else if (isClassifier()) showAsClassifier();
  else $("model-summary").textContent =
    `${model.architecture}, ${model.parameters.toLocaleString("en")} parameters, ` +
    `${model.source_tokenizer.kind} → ${model.target_tokenizer.kind} tokens, ${model.precision}` +
    (c.arch === "transformer" ? `, ${c.encoder_layers} + ${c.decoder_layers} layers, ` +
                                `${c.num_heads} heads` : "");
  const params = new URLSearchParams(location.search);
  const kinds = isRnnClassifier() ? ["pooling"]
              : isClassifier() ? ["pooling", "encoder"] : ["cross", "self", "encoder"];
  if (kinds.includes(params.get("kind")) && !isLanguageModel()) {
    $("kind").value = params.get("kind");
  }
  fillChoices(params.get("layer") || undefined, params.get("head") || undefined);
  $("kind").addEventListener("change", () => { fillChoices(); show(); });
  $("layer").addEventListener("change", show);
  $("head").addEventListener("change", show);
  $("query").addEventListener("submit", (event) => { event.preventDefault(); show(); });
  if (params.get("text")) {
    $("text").value = params.get("text");
    await show();
  }
}

start();
