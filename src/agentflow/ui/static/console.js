// agentflow console: keeps an open page in step with the store, without a reload.
//
// Every PERIOD_MS the page's own address is fetched again with X-Console-Live: 1;
// the server answers with the page's <main> alone and an ETag of it (304 when it
// is unchanged). A changed <main> is put in place, unless the operator is typing
// in one of its forms: then the header says the page changed, and nothing they
// typed is lost. Hidden tabs do not poll. No other script runs on these pages.
(function () {
  "use strict";
  var PERIOD_MS = 2000;
  var main = document.getElementById("live");
  if (!main || main.getAttribute("data-live") !== "1") {
    return;
  }
  var etag = main.getAttribute("data-etag");
  var typed = false;
  main.addEventListener("input", function () {
    typed = true;
  });

  function editing() {
    var active = document.activeElement;
    var inForm = active && main.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    return typed || Boolean(inForm);
  }

  function stale() {
    var banner = document.getElementById("stale");
    if (banner) {
      banner.textContent = "this page changed: reload to see it";
      banner.hidden = false;
    }
  }

  function poll() {
    if (document.hidden) {
      window.setTimeout(poll, PERIOD_MS);
      return;
    }
    var headers = { "X-Console-Live": "1" };
    if (etag) {
      headers["If-None-Match"] = etag;
    }
    fetch(window.location.href, { headers: headers, credentials: "same-origin", cache: "no-store" })
      .then(function (answer) {
        var fresh = answer.headers.get("ETag");
        if (answer.status === 304 || !fresh || fresh === etag) {
          return null;
        }
        return answer.text().then(function (html) {
          if (editing()) {
            stale();
            return;
          }
          main.innerHTML = html;
          main.setAttribute("data-etag", fresh);
          etag = fresh;
        });
      })
      .catch(function () {
        // the console stopped or restarts: try again at the next period
      })
      .then(function () {
        window.setTimeout(poll, PERIOD_MS);
      });
  }

  window.setTimeout(poll, PERIOD_MS);
})();
