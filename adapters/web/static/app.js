"use strict";
// The web chat's one script (served by the companion itself; no build step, nothing from elsewhere):
// live answers over server-sent events, sending, private mode's form, the banner's count-down.
// Text is only ever drawn with textContent. Nothing typed is kept: the passphrase field is emptied
// before its request leaves, and a message that may hold a secret is not drawn back.
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
  var pageMode = body.dataset.mode;
  var pageSegment = body.dataset.segment || "";

  function item(kind, text) {
    var li = document.createElement("li");
    li.className = "msg " + kind;
    li.textContent = text;
    return li;
  }
  function shown(li) {
    list.appendChild(li);
    li.scrollIntoView({block: "end"});
  }
  function sameMode(mode, segment) {
    return mode === pageMode && String(segment === null || segment === undefined ? "" : segment) === pageSegment;
  }
  function newId() {
    if (window.crypto && window.crypto.randomUUID) { return window.crypto.randomUUID(); }
    return Date.now().toString(16) + Math.random().toString(16).slice(2);
  }

  function send(text) {
    // Drawn once the server says it may be kept: a message may hold a passphrase.
    var li = item("user pending", "\u2026");
    shown(li);
    return post("/send", {text: text, id: newId()}, true).then(function (answer) {
      if (!answer.ok) {
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
      li.className = "msg error";
      li.textContent = "Not sent: the companion did not answer.";
    });
  }

  var events = new window.EventSource("/events");
  events.addEventListener("open", function () { status.textContent = ""; });
  events.addEventListener("error", function () { status.textContent = "Reconnecting\u2026"; });
  events.addEventListener("history", function (event) {
    var data = JSON.parse(event.data);
    if (!sameMode(data.mode, data.segment)) { events.close(); redraw(); return; }
    var pending = Array.prototype.slice.call(list.querySelectorAll(".pending"));
    list.textContent = "";
    data.items.forEach(function (entry) {
      list.appendChild(entry.placeholder ? item("placeholder", placeholderText) : item(entry.role, entry.text));
    });
    pending.forEach(function (li) { list.appendChild(li); });
    if (list.lastElementChild) { list.lastElementChild.scrollIntoView({block: "end"}); }
  });
  events.addEventListener("live", function (event) {
    var data = JSON.parse(event.data);
    var li = item("assistant " + data.kind, data.kind === "file" ? "" : data.text);
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
    shown(li);
  });
  events.addEventListener("mode", function (event) {
    var data = JSON.parse(event.data);
    if (!sameMode(data.mode, data.segment)) { events.close(); redraw(); return; }
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
