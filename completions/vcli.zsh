#compdef vcli

_vcli_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _VCLI_COMPLETE=complete_zsh vcli)
}

compdef _vcli_completion vcli