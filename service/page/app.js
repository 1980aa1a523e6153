// The page's behaviour: POST /fill and POST /score with what the forms say, and the answer drawn as elements.
// Every text that comes from the service (phrases, passages, ids, error messages) goes into the page as text
// (textContent, createTextNode), never as HTML: a passage holding "<script>" shows those characters.
"use strict";

const KEY = "npm-fill-key"; // the API key, in this tab's session storage only

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function percent(x) {
  return (100 * x).toFixed(1) + "%";
}

function bar(value, label) {
  const fill = el("span", { class: "bar-fill" });
  fill.style.width = percent(Math.max(0, Math.min(1, value)));
  return el("span", { class: "bar", title: label }, fill);
}

// The passage with the phrase marked: its occurrence nearest the middle (the context is cut around it), found
// regardless of case where lowering keeps every length (else as written: the offsets must stay those of `context`).
function passage(context, phrase) {
  const fold = context.toLowerCase().length === context.length && phrase.toLowerCase().length === phrase.length;
  const lower = fold ? context.toLowerCase() : context;
  const want = fold ? phrase.toLowerCase() : phrase;
  let best = -1;
  for (let at = lower.indexOf(want); at !== -1 && want; at = lower.indexOf(want, at + 1)) {
    if (best === -1 || Math.abs(at - context.length / 2) < Math.abs(best - context.length / 2)) best = at;
  }
  if (best === -1) return el("span", { class: "context", text: context });
  return el(
    "span",
    { class: "context" },
    document.createTextNode(context.slice(0, best)),
    el("mark", { text: context.slice(best, best + want.length) }),
    document.createTextNode(context.slice(best + want.length)),
  );
}

function evidenceList(evidence, phrase) {
  const list = el("ol", { class: "evidence" });
  for (const e of evidence) {
    list.append(el("li", {}, passage(e.context, phrase), el("span", { class: "doc", text: e.doc_id })));
  }
  return list;
}

function timings(result) {
  const parts = Object.entries(result.timings_ms || {}).map(([stage, ms]) => `${stage} ${ms.toFixed(1)}`);
  return el("p", { class: "timings", text: `took ${result.took_ms.toFixed(1)} ms` + (parts.length ? ` (${parts.join(", ")})` : "") });
}

const MASK = /<mask>|\[MASK\]/gi; // common/masks.py's MASK_PATTERN

// The filled sentence: the request's text with each mask's top fill marked (a mask left open stays as it was).
function filledSentence(text, masks) {
  const sentence = el("p", { class: "filled" });
  const parts = text.split(MASK);
  const opened = text.match(MASK) || [];
  parts.forEach((part, k) => {
    sentence.append(document.createTextNode(part));
    if (k < opened.length) {
      const top = masks[k] && masks[k].candidates.length ? masks[k].candidates[0].phrase : null;
      sentence.append(top === null ? el("span", { class: "open-mask", text: opened[k] }) : el("mark", { class: "fill", text: top }));
    }
  });
  return sentence;
}

function showFill(result, text) {
  const out = el("div", { class: "fill-result" }, filledSentence(text, result.masks));
  for (const mask of result.masks) {
    const box = el("section", { class: "mask" }, el("h2", { text: `mask ${mask.index + 1}` }));
    if (mask.abstained) box.append(el("p", { class: "abstained", text: "abstained: no fill is sure enough" }));
    const list = el("ol", { class: "candidates" });
    for (const c of mask.candidates) {
      const head = el(
        "div",
        { class: "candidate-head" },
        el("span", { class: "phrase", text: c.phrase }),
        bar(c.confidence, `confidence ${percent(c.confidence)}`),
        el("span", { class: "number", text: `confidence ${percent(c.confidence)}` }),
      );
      list.append(el("li", { class: "candidate" }, head, evidenceList(c.evidence, c.phrase)));
    }
    box.append(list);
    out.append(box);
  }
  out.append(timings(result));
  return out;
}

function showScore(result) {
  const out = el("div", { class: "score-result" });
  for (const mask of result.masks) {
    const box = el("section", { class: "mask" }, el("h2", { text: `mask ${mask.index + 1}` }));
    if (mask.abstained) box.append(el("p", { class: "abstained", text: "abstained: no retrieved token voted" }));
    const list = el("ol", { class: "choices" });
    for (const c of mask.choices) {
      const head = el(
        "div",
        { class: "candidate-head" + (c.label === mask.predicted ? " predicted" : "") },
        el("span", { class: "phrase", text: c.label }),
        bar(c.probability, `probability ${percent(c.probability)}`),
        el("span", { class: "number", text: percent(c.probability) }),
      );
      list.append(el("li", { class: "choice" }, head, evidenceList(c.evidence, c.label)));
    }
    box.append(list);
    out.append(box);
  }
  out.append(timings(result));
  return out;
}

// The service's one error shape: {"error": message, "error_type": kind}; a 401 asks for the key, a 429 / 503
// says when to retry (Retry-After).
function showError(status, body, retryAfter) {
  const box = document.getElementById("error");
  const message = body && typeof body.error === "string" ? body.error : `HTTP ${status}`;
  const lines = [el("strong", { text: `${status} ${(body && body.error_type) || "error"}` }), el("span", { text: message })];
  if (status === 401) {
    document.getElementById("key-box").hidden = false;
    lines.push(el("span", { text: "This server needs an API key: enter it above and ask again." }));
    document.getElementById("key").focus();
  }
  if ((status === 429 || status === 503) && retryAfter) lines.push(el("span", { text: `Retry in ${retryAfter} s.` }));
  box.replaceChildren(...lines);
  box.hidden = false;
}

async function ask(path, body, show) {
  const result = document.getElementById("result");
  const error = document.getElementById("error");
  error.hidden = true;
  result.replaceChildren(el("p", { class: "busy", text: "asking..." }));
  const headers = { "Content-Type": "application/json" };
  const key = document.getElementById("key").value.trim();
  if (key) {
    sessionStorage.setItem(KEY, key);
    headers.Authorization = `Bearer ${key}`;
  }
  let response;
  try {
    response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body) });
  } catch (e) {
    result.replaceChildren();
    showError(0, { error: `the server did not answer (${e.message})`, error_type: "network" }, null);
    return;
  }
  let data = null;
  try {
    data = await response.json();
  } catch (e) {
    data = null;
  }
  result.replaceChildren();
  if (!response.ok) {
    showError(response.status, data, response.headers.get("Retry-After"));
    return;
  }
  result.append(show(data, body.text));
}

function number(id) {
  const value = document.getElementById(id).value;
  return value === "" ? undefined : Number(value);
}

document.addEventListener("DOMContentLoaded", () => {
  const saved = sessionStorage.getItem(KEY);
  if (saved) {
    document.getElementById("key").value = saved;
    document.getElementById("key-box").hidden = false;
  }
  document.getElementById("fill-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const body = { text: document.getElementById("fill-text").value, top_k: number("fill-top-k"), evidence: number("fill-evidence") };
    const mode = document.getElementById("fill-mode").value;
    if (mode) body.mode = mode;
    const least = number("fill-min-confidence");
    if (least !== undefined) body.min_confidence = least;
    ask("/fill", body, showFill);
  });
  document.getElementById("score-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const choices = document.getElementById("score-choices").value.split(",").map((c) => c.trim()).filter((c) => c);
    ask("/score", { text: document.getElementById("score-text").value, choices, evidence: number("score-evidence") }, showScore);
  });
});
