"use strict";
// The web chat's one script (served by the companion itself; no build step, nothing from elsewhere):
// live answers over server-sent events, sending, private mode's form, the banner's count-down.
// Text is only ever drawn with textContent (a reply's formatting as elements around it, never as
// HTML). Nothing typed is kept: the passphrase field is emptied before its request leaves, and a
// message that may hold a secret is not drawn back. A reply the model is still writing grows in one
// bubble (`partial` events); its final text, formatted, replaces that bubble's text in place. When
// private mode ends the server says so at once (a `history` frame of normal mode's view): the page
// draws it in place of everything private (a reply still being written becomes the constant line)
// and goes on in normal mode, without loading again (the lane may still hold the answer cut off).
(function () {
  var meta = document.querySelector('meta[name="csrf-token"]');
  var csrf = meta ? meta.getAttribute("content") : "";
  var body = document.body;

  function post(url, payload, asJson) {
    var headers = {"X-CSRF-Token": csrf, "Accept": "application/json"};
    var data;
    if (asJson) {
      headers["Content-Type"] = "application/json";
      data = JSON.stringify(payload);
    } else {
      headers["Content-Type"] = "application/x-www-form-urlencoded";
      data = new URLSearchParams(payload).toString();
    }
    return window.fetch(url, {method: "POST", credentials: "same-origin", headers: headers, body: data})
      .then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (answer) {
          answer.ok = response.ok;
          return answer;
        });
      });
  }

  function redraw() {
    window.location.replace(window.location.pathname);
  }

  // Private mode's banner, on every page: when private mode ends by itself, the page is drawn again
  // (the chat's history then as normal mode reads it). The server says how long is left, so the
  // browser's clock does not matter.
  var endTimer = null;
  function countDown(ms) {
    if (endTimer !== null) { window.clearTimeout(endTimer); endTimer = null; }
    if (typeof ms === "number" && ms >= 0) { endTimer = window.setTimeout(redraw, ms + 1000); }
  }
  var banner = document.getElementById("private-banner");
  if (banner) { countDown(Number(banner.dataset.remaining)); }
  var normalForm = document.getElementById("normal-form");
  if (normalForm) {
    normalForm.addEventListener("submit", function (event) {
      event.preventDefault();
      post("/normal", {}, true).then(redraw, redraw);
    });
  }

  var list = document.getElementById("messages");
  if (!list) { return; }
  var status = document.getElementById("chat-status");
  var placeholderText = list.dataset.placeholder || "";
  var endedText = list.dataset.ended || "";
  var pageMode = body.dataset.mode;
  var pageSegment = body.dataset.segment || "";

  function item(kind, text, format) {
    var li = document.createElement("li");
    li.className = "msg " + kind;
    draw(li, text, format);
    return li;
  }

  // A reply's formatting: its rendered text and entities (offsets and lengths in UTF-16 code units,
  // as JavaScript strings count them), drawn as nested elements around text nodes.
  var TAGS = {bold: "strong", italic: "em", strikethrough: "s", spoiler: "span", code: "code", pre: "pre",
    text_link: "a", blockquote: "blockquote", expandable_blockquote: "blockquote"};
  function element(entity) {
    var tag = TAGS[entity.type] || "span";
    var node = document.createElement(tag);
    if (entity.type === "spoiler") { node.className = "spoiler"; }
    if (entity.type === "pre" && entity.language) { node.dataset.language = entity.language; }
    if (tag === "a") {
      if (/^(https?:|mailto:)/i.test(entity.url || "")) {
        node.href = entity.url;
        node.rel = "noopener noreferrer";
        node.target = "_blank";
      } else {
        node = document.createElement("span");
      }
    }
    return node;
  }
  function draw(li, text, format) {
    li.textContent = "";
    if (!format || !format.entities || !format.entities.length) {
      li.textContent = format ? format.text : text;
      return;
    }
    var source = format.text;
    var entities = format.entities.slice().sort(function (a, b) {
      return a.offset - b.offset || b.length - a.length;  // the outer one first
    });
    var stack = [{node: li, end: source.length}];
    var at = 0;
    function upTo(end) {
      if (end > at) { stack[stack.length - 1].node.appendChild(document.createTextNode(source.slice(at, end))); at = end; }
    }
    entities.forEach(function (entity) {
      var start = Math.max(entity.offset, at);
      while (stack.length > 1 && stack[stack.length - 1].end <= start) { upTo(stack[stack.length - 1].end); stack.pop(); }
      upTo(start);
      var end = Math.min(entity.offset + entity.length, stack[stack.length - 1].end);
      if (end <= start) { return; }
      var node = element(entity);
      stack[stack.length - 1].node.appendChild(node);
      stack.push({node: node, end: end});
    });
    while (stack.length) { upTo(stack[stack.length - 1].end); stack.pop(); }
  }

  // The page follows the newest message unless its reader scrolled up to read an older one.
  function atBottom() {
    var root = document.scrollingElement || document.documentElement;
    return root.scrollHeight - root.scrollTop - root.clientHeight < 80;
  }
  function shown(li) {
    var typing = list.querySelector(".typing");
    if (typing && typing !== li) { list.insertBefore(li, typing); } else { list.appendChild(li); }
    li.scrollIntoView({block: "end"});
  }

  // "…" under the owner's message until the first words of the answer arrive (the POST may come back
  // sooner: a message held for a burst is answered later), or TYPING_MS at most.
  var TYPING_MS = 300000;
  var typingTimer = null;
  function typing(on) {
    var dots = list.querySelector(".typing");
    if (typingTimer !== null) { window.clearTimeout(typingTimer); typingTimer = null; }
    if (on) { typingTimer = window.setTimeout(function () { typing(false); }, TYPING_MS); }
    if (on && !dots) {
      dots = document.createElement("li");
      dots.className = "msg typing";
      dots.setAttribute("aria-label", "The companion is writing");
      dots.textContent = "\u2026";
      list.appendChild(dots);
      dots.scrollIntoView({block: "end"});
    } else if (!on && dots) {
      dots.remove();
    }
  }
  function bubble(id) {
    var found = null;
    Array.prototype.forEach.call(list.querySelectorAll("li[data-stream]"), function (li) {
      if (li.dataset.stream === id) { found = li; }
    });
    return found;
  }
  function sameMode(mode, segment) {
    return mode === pageMode && String(segment === null || segment === undefined ? "" : segment) === pageSegment;
  }
  // Private mode ended: nothing of it stays on the page. `items`: normal mode's view (each interval its
  // placeholder; without it, one placeholder). A reply the end cut off (still being written, or
  // withdrawn already) stands as the constant line; what was being sent goes too.
  function endPrivate(items) {
    var cut = Array.prototype.map.call(list.querySelectorAll("li.streaming, li.retracted"), function (li) {
      return li.dataset.stream;
    });
    typing(false);
    list.textContent = "";
    (items || [{placeholder: true}]).forEach(function (entry) {
      list.appendChild(entry.placeholder ? item("placeholder", placeholderText) : item(entry.role, entry.text, entry.format));
    });
    cut.forEach(function (id) {
      var li = item("assistant retracted", endedText);
      li.dataset.stream = id;
      list.appendChild(li);
    });
    var privateBanner = document.getElementById("private-banner");
    if (privateBanner) { privateBanner.remove(); }
    var entry = document.getElementById("enter-private");
    if (entry) { entry.hidden = false; }
    countDown(null);
    body.className = "normal";
    body.dataset.mode = pageMode = "normal";
    body.dataset.segment = pageSegment = "";
  }
  function modeChanged(mode, items) {
    if (pageMode === "private" && mode === "normal" && items) {
      endPrivate(items);  // drawn in place: the page goes on in normal mode, its events still coming
      return;
    }
    events.close();
    if (pageMode === "private" && mode === "normal") { endPrivate(null); }
    redraw();
  }
  function newId() {
    if (window.crypto && window.crypto.randomUUID) { return window.crypto.randomUUID(); }
    return Date.now().toString(16) + Math.random().toString(16).slice(2);
  }

  function send(text) {
    // Drawn once the server says it may be kept: a message may hold a passphrase.
    var li = item("user pending", "\u2026");
    shown(li);
    typing(true);
    return post("/send", {text: text, id: newId()}, true).then(function (answer) {
      if (!answer.ok) {
        typing(false);
        li.className = "msg error";
        li.textContent = answer.error || "Not sent.";
      } else if (answer.hide_input) {
        li.className = "msg user withheld";
        li.textContent = "(a message that may hold a secret: not shown, not kept)";
      } else {
        li.className = "msg user";
        li.textContent = text;
      }
    }, function () {
      typing(false);
      li.className = "msg error";
      li.textContent = "Not sent: the companion did not answer.";
    });
  }

  var events = new window.EventSource("/events");
  events.addEventListener("open", function () { status.textContent = ""; });
  events.addEventListener("error", function () { status.textContent = "Reconnecting\u2026"; });
  events.addEventListener("history", function (event) {
    var data = JSON.parse(event.data);
    if (!sameMode(data.mode, data.segment)) { modeChanged(data.mode, data.items); return; }
    // What is being sent stays; a reply being written goes (the history holds it once it is
    // stored, otherwise its next partial event draws it again).
    var pending = Array.prototype.slice.call(list.querySelectorAll(".pending, .typing"));
    list.textContent = "";
    data.items.forEach(function (entry) {
      list.appendChild(entry.placeholder ? item("placeholder", placeholderText) : item(entry.role, entry.text, entry.format));
    });
    pending.forEach(function (li) { list.appendChild(li); });
    if (list.lastElementChild) { list.lastElementChild.scrollIntoView({block: "end"}); }
  });
  events.addEventListener("partial", function (event) {
    var data = JSON.parse(event.data);
    var li = bubble(data.stream);
    if (li) {
      var follow = atBottom();
      if (li.textContent !== data.text) { li.textContent = data.text; }
      if (follow) { li.scrollIntoView({block: "end"}); }
      return;
    }
    typing(false);
    li = item("assistant reply streaming", data.text);
    li.dataset.stream = data.stream;
    shown(li);
  });
  events.addEventListener("live", function (event) {
    var data = JSON.parse(event.data);
    var ids = data.stream || [];
    var li = ids.length ? bubble(ids[0]) : null;
    if (data.kind === "retraction") {
      // A private reply its interval's end cut off: its bubbles show the constant line; a page
      // without them (drawn since) has nothing to withdraw.
      ids.slice(1).forEach(function (id) { var extra = bubble(id); if (extra) { extra.remove(); } });
      if (li) {
        li.className = "msg assistant retracted";
        li.textContent = data.text;
      }
      return;
    }
    ids.slice(1).forEach(function (id) { var extra = bubble(id); if (extra) { extra.remove(); } });
    var inPlace = li !== null;
    var follow = atBottom();
    if (inPlace) {
      // The bubble it was written in takes its final text, formatted: no second bubble.
      li.className = "msg assistant " + data.kind;
      draw(li, data.text, data.format);
    } else {
      li = item("assistant " + data.kind, data.kind === "file" ? "" : data.text, data.format);
      if (ids.length) { li.dataset.stream = ids[0]; }
    }
    if (data.kind === "reply" || data.kind === "answer") { typing(false); }  // an answer: the words are here
    if (data.file) {
      var bytes = Uint8Array.from(window.atob(data.file.data), function (c) { return c.charCodeAt(0); });
      var link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([bytes], {type: data.file.type}));
      link.download = data.file.name;
      link.textContent = "Download " + data.file.name;
      li.appendChild(link);
    }
    if (data.confirm) {
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = data.confirm.label;
      button.addEventListener("click", function () { button.disabled = true; send(data.confirm.command); });
      li.appendChild(button);
    }
    if (!inPlace) { shown(li); } else if (follow) { li.scrollIntoView({block: "end"}); }
  });
  events.addEventListener("mode", function (event) {
    var data = JSON.parse(event.data);
    if (!sameMode(data.mode, data.segment)) { modeChanged(data.mode, null); return; }
    var ends = document.getElementById("private-ends");
    if (ends && data.ends) { ends.textContent = data.ends; }
    countDown(data.remaining);
  });

  var form = document.getElementById("send-form");
  var box = document.getElementById("text");
  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = box.value;
    if (!text.trim()) { return; }
    box.value = "";
    send(text);
    box.focus();
  });
  box.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); form.requestSubmit(); }
  });

  var privateForm = document.getElementById("private-form");
  if (privateForm) {
    privateForm.addEventListener("submit", function (event) {
      event.preventDefault();
      var field = document.getElementById("passphrase");
      var fields = {passphrase: field.value, expiry: privateForm.elements.expiry.value};
      field.value = "";  // emptied before the request leaves: the page keeps nothing of it
      status.textContent = "Checking the passphrase\u2026";
      post("/private", fields, false).then(function (answer) {
        status.textContent = answer.ok ? "" : (answer.error || "Not sent.");
      }, function () {
        status.textContent = "Not sent: the companion did not answer.";
      });
      fields.passphrase = "";
    });
  }
})();
