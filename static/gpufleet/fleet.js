// Copy buttons: <button data-copy="ID"> copies the value or text of the element with that id.
document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-copy]");
  if (!button) return;
  const source = document.getElementById(button.dataset.copy);
  const text = source.value ?? source.textContent;
  const done = () => { button.textContent = "Copied"; setTimeout(() => { button.textContent = "Copy"; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done);
  } else {
    // Plain-HTTP pages (the control network's listeners) have no clipboard API: select and copy.
    source.select();
    document.execCommand("copy");
    done();
  }
});
