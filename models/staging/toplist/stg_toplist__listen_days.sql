{#- Counts as stored, without merging, like stg_toplist__listen_buckets. -#}

with

source as (

    select * from {{ source('toplist', 'listens_by_day') }}

),

final as (

    select
        day,
        country,
        song_id,
        finalizeAggregation(listens) as listens
    from source

)

select * from final
